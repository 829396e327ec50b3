"""The CLI as a person sees it: a command run on a pseudo-terminal of 80×24, its output played through a
terminal emulator (pyte), so a test reads the screen — and what scrolled off it — as they would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyte

STRATA = [sys.executable, "-m", "strata.cli"]


@dataclass(frozen=True)
class Screen:
    """What a terminal showed of a run: every line it printed, those scrolled off first, right-trimmed;
    and the exit code."""

    lines: list[str]
    returncode: int

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_on_terminal(
    args: Sequence[str], env: Mapping[str, str], *, columns: int = 80, rows: int = 24, timeout: float = 60
) -> Screen:
    """Run ``strata args`` with stdout and stderr on one pseudo-terminal of ``columns``×``rows`` (as a
    shell runs it), playing its output through an emulated terminal of that size."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    screen = pyte.HistoryScreen(columns, rows, history=10_000)
    stream = pyte.ByteStream(screen)
    env = {k: v for k, v in {**os.environ, **env}.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [*STRATA, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the pty is closed: every writer has exited
                    break
                if not chunk:
                    break
                stream.feed(chunk)
        else:
            raise TimeoutError(f"strata {' '.join(args)} ran past {timeout} s")
        returncode = process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    scrolled = ["".join(line[x].data for x in range(columns)) for line in screen.history.top]
    shown = list(screen.display)
    lines = [line.rstrip() for line in [*scrolled, *shown]]
    while lines and not lines[-1]:
        lines.pop()
    return Screen(lines, returncode)
