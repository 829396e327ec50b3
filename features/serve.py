"""The feature server over Strata's store: Feast's app (:mod:`features.http_api`) under gunicorn.

Run as ``feast serve`` runs it (gunicorn with uvicorn workers, the same HTTP protocol the Feast
SDK and clients speak), with what its defaults get wrong here changed: no worker restart every
1,000 requests (``max_requests``: an ~800 ms stall each time), no access log; each worker dies
with the master (a parent-death signal: after ``kill -9`` of the master an orphaned worker kept
the port, so a restart failed with "Address already in use"); and gunicorn's control socket,
``~/.gunicorn/gunicorn.ctl`` by default and shared by every gunicorn of the user, is off (Strata
has no use for it) while its worker heartbeat files go under ``STRATA_HOME/run``.
"""

from __future__ import annotations

import gc
from typing import Any

from features.http_api import Limits, build_app
from features.store import applied_store
from warehouse.processes import die_with_parent
from warehouse.settings import Settings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6566


def serve(
    settings: Settings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    workers: int = 1,
    *,
    allow_writes: bool = False,
    limits: Limits = Limits(),
    registry_ttl_s: int = 60,
) -> None:
    """Serve the online features over HTTP until stopped (blocks)."""
    store, _ = applied_store(settings)
    app = build_app(store, allow_writes=allow_writes, limits=limits, registry_ttl_s=registry_ttl_s)
    run_dir = settings.home / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    # What is loaded now lives as long as the server: out of the collector's sight (workers fork
    # from here), and collections rarer, so a request seldom waits for a full collection.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)
    _gunicorn(
        app,
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "uvicorn_worker.UvicornWorker",
            "worker_connections": 1000,
            "max_requests": 0,
            "max_requests_jitter": 0,
            "keepalive": 30,
            "accesslog": None,
            "control_socket_disable": True,
            "worker_tmp_dir": str(run_dir),
            "post_fork": _die_with_master,
        },
    ).run()


def _gunicorn(app: Any, options: dict[str, Any]) -> Any:
    """A gunicorn application serving ``app`` with exactly ``options`` (no command line, no config file)."""
    import gunicorn.app.base

    class Server(gunicorn.app.base.BaseApplication):  # type: ignore[misc]  # gunicorn is untyped: its base is Any
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return app

    return Server()


def _die_with_master(_server: Any, worker: Any) -> None:
    """gunicorn's ``post_fork`` hook: the kernel sends this worker SIGTERM when the master dies."""
    die_with_parent(worker.ppid)
