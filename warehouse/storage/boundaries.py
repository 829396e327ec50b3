"""Commit boundaries: the points between two commits, where a crash must leave nothing broken.

Every Delta commit and vacuum passes one. Tests use them to stop a process exactly there:
``STRATA_PAUSE_AFTER=N`` stops it (SIGSTOP) after the N-th boundary, ``STRATA_PAUSE_AFTER=every``
after each one, for the test to copy what a crash there would leave, or to kill it; and
``STRATA_BOUNDARY_LOG=FILE`` appends each boundary's name. Otherwise passing one costs two
dictionary lookups.

A step's first read is a point of its own (:func:`first_read`, not counted among the commit
boundaries): ``STRATA_PAUSE_AT_READ=STEP`` stops that step there, holding its locks and what it
read, for a race test to run another command (``forget``) while it waits.
"""

from __future__ import annotations

import os
import signal
import threading

_passed = 0
_lock = threading.Lock()


def passed(name: str) -> None:
    """Say that the process just passed the boundary ``name`` (e.g. ``commit dwd.request``)."""
    global _passed
    log, pause = os.environ.get("STRATA_BOUNDARY_LOG"), os.environ.get("STRATA_PAUSE_AFTER")
    if not log and not pause:
        return
    with _lock:
        _passed += 1
        if log:
            with open(log, "a") as handle:
                handle.write(name + "\n")
        if pause == "every" or (pause and pause.isdigit() and int(pause) == _passed):
            os.kill(os.getpid(), signal.SIGSTOP)


_paused: set[str] = set()


def first_read(step: str) -> None:
    """Say that ``step`` (e.g. ``score``) has read its input and holds it; the first time, stops the
    process there (SIGSTOP) when ``STRATA_PAUSE_AT_READ`` names the step."""
    if os.environ.get("STRATA_PAUSE_AT_READ") == step and step not in _paused:
        _paused.add(step)
        os.kill(os.getpid(), signal.SIGSTOP)
