"""What a server's worker processes share: each dies with the process that started it."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent ``parent_pid`` dies; exit now if it has.

    A worker outliving its master (``kill -9``) keeps serving and holding the port, so a restart
    fails with "Address already in use"; SIGTERM runs the worker's graceful stop. Linux only:
    elsewhere nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before the signal was asked for
        os._exit(0)
