"""The Feast feature server over Strata's store, run the way it should run.

It is Feast's own server (``feast serve``: the same app, the same HTTP protocol the Feast
SDK and clients speak), with what the defaults get wrong here turned off: no worker restart
every 1,000 requests (``max_requests``: an ~800 ms stall each time) and no access log.
"""

from __future__ import annotations

import gc

from contracts import load_feast
from features.store import applied_store
from warehouse.settings import Settings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6566


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, workers: int = 1,
          registry_ttl_s: int = 60) -> None:
    """Serve the online features over HTTP until stopped (blocks)."""
    load_feast()
    from feast.feature_server import start_server

    store, _ = applied_store(settings)
    # What is loaded now lives as long as the server: out of the collector's sight (workers fork
    # from here), and collections rarer, so a request seldom waits for a full collection.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)
    start_server(store, host=host, port=port, no_access_log=True, workers=workers, worker_connections=1000,
                 max_requests=0, max_requests_jitter=0, keep_alive_timeout=30, registry_ttl_sec=registry_ttl_s,
                 tls_key_path="", tls_cert_path="", metrics=False)
