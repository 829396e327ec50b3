"""``strata collect`` for tests and benchmarks: in this process (a uvicorn thread) or as a CLI process."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from warehouse.settings import load_collect_settings, load_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the receiver exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@contextlib.contextmanager
def receiver_thread(**env: str) -> Iterator[str]:
    """Serve a receiver (settings from the environment plus ``env``) in a thread; yields its base URL.

    Leaving the block shuts it down as SIGTERM would: the open segment lands.
    """
    import uvicorn

    from warehouse.sources.collector.receiver import build_receiver

    port = free_port()
    collect = load_collect_settings({**os.environ, "STRATA_COLLECT_PORT": str(port), **env})
    app = build_receiver(load_settings(), collect)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def start_cli(port: int, env: dict[str, str], log: Path, workers: int = 1) -> subprocess.Popen:
    """``strata collect --port PORT --workers N`` as its own process, once it listens."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "strata", "collect", "--port", str(port), "--workers", str(workers)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for_port(port, process=process)
    return process
