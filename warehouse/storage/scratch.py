"""Scratch space: temporary files live under ``STRATA_HOME/tmp``, never in ``/tmp`` or ``/dev/shm``.

Parse files hold raw lines (user ids included), so they stay where ``strata forget`` and
retention look and the lake's access rules apply. Each process has its own folder; a
process that died (SIGKILL) cannot remove its own, so the next process clears the folders
of processes no longer running.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from warehouse.settings import Settings

_lock = threading.Lock()
_cleared: set[Path] = set()


def scratch_dir(settings: Settings) -> Path:
    """This process's scratch folder, ``<home>/tmp/<pid>``, created on first use."""
    root = settings.home / "tmp"
    mine = root / str(os.getpid())
    with _lock:
        if root not in _cleared:
            _clear_dead(root)
            _cleared.add(root)
        mine.mkdir(parents=True, exist_ok=True)
    return mine


def _clear_dead(root: Path) -> None:
    if not root.is_dir():
        return
    for folder in root.iterdir():
        if folder.name.isdigit() and not _alive(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
