"""Commit boundaries: the points between two commits, where a crash must leave nothing broken.

Every Delta commit and vacuum passes one. Tests use them to stop a process exactly there:
``STRATA_PAUSE_AFTER=N`` stops it (SIGSTOP) after the N-th boundary, ``STRATA_PAUSE_AFTER=every``
after each one, for the test to copy what a crash there would leave, or to kill it; and
``STRATA_BOUNDARY_LOG=FILE`` appends each boundary's name. Otherwise passing one costs two
dictionary lookups.
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
