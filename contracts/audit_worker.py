"""The GX audit in a worker process, so importing Great Expectations does not stall the writer.

Importing GX is seconds of pure Python. In the writer's process it would hold the GIL
(and trigger garbage collections) while the data streams; in a child process started
when a write begins, it runs beside the stream on its own interpreter and is usually done
by the time the sample is ready. One worker serves every audit of the process, so the
import is paid once per process.

The worker is ``python -m contracts.audit_worker``: it reads pickled requests on stdin
and answers on stdout. A worker that died is replaced on the next audit.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from contracts.gx_audit import AuditResult
from contracts.model import Contract

_lock = threading.Lock()
_process: subprocess.Popen[bytes] | None = None


def warm_up() -> None:
    """Start the worker (it imports GX at once) unless it is already running."""
    global _process
    with _lock:
        if _process is None or _process.poll() is not None:
            # The worker imports this very package, wherever the caller found it.
            root = str(Path(__file__).resolve().parent.parent)
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            # One thread of numeric work: idle BLAS threads would spin on the writer's cores.
            threads = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
            _process = subprocess.Popen([sys.executable, "-m", "contracts.audit_worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**os.environ, **threads, "PYTHONPATH": path})


def pid() -> int | None:
    """Process id of the running worker, if one is running."""
    with _lock:
        return _process.pid if _process is not None and _process.poll() is None else None


def audit(sample: pa.Table, contract: Contract, *, now: datetime | None = None) -> AuditResult:
    """:func:`contracts.gx_audit.audit` of ``sample``, run in the worker."""
    warm_up()
    with _lock:
        assert _process is not None and _process.stdin is not None and _process.stdout is not None
        try:
            pickle.dump((sample, contract, now), _process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            _process.stdin.flush()
            status, payload = pickle.load(_process.stdout)
        except (BrokenPipeError, EOFError) as exc:
            raise RuntimeError(f"the GX audit worker died (exit code {_process.poll()}); "
                               "see its error output above") from exc
    if status == "error":
        raise payload
    return payload


@atexit.register
def stop() -> None:
    """Stop the worker and wait for it (the next audit starts a new one)."""
    global _process
    with _lock:
        if _process is not None and _process.poll() is None:
            assert _process.stdin is not None
            _process.stdin.close()  # the worker exits at end of input
            try:
                _process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _process.kill()
                _process.wait()
        _process = None


def _serve(requests: BinaryIO, answers: BinaryIO) -> None:
    import gc

    # Importing GX builds a large, long-lived object graph: collecting while it grows costs
    # a fifth of the import, and frozen objects are never scanned again.
    gc.disable()
    from contracts.gx_audit import audit as gx_audit
    from contracts.gx_audit import warm_up as gx_warm_up

    gx_warm_up()
    gc.freeze()
    gc.enable()
    while True:
        try:
            sample, contract, now = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, object] = ("ok", gx_audit(sample, contract, now=now))
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            answer = ("error", exc)
        try:
            data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            data = pickle.dumps(("error", RuntimeError(repr(answer[1]))))
        answers.write(data)
        answers.flush()


if __name__ == "__main__":
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything GX prints must not corrupt the answers
    _serve(requests, answers)
