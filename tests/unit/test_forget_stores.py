"""Which online stores forget reaches, and how it reaches a Redis written to before."""

from __future__ import annotations

import json
from pathlib import Path

from features.forget import redis_url
from features.materialize import store_id, stores_written
from warehouse.settings import load_settings

KEY = "test-key-not-a-secret-0123456789"


def test_every_store_in_the_state_is_reached_and_no_password_is_ever_stored(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "STRATA_HOME": str(tmp_path),
            "STRATA_PSEUDONYM_KEY": KEY,
            "STRATA_ONLINE_STORE": "redis://:s3cret@10.0.0.5:6380/2",
        }
    )
    assert store_id(settings) == "redis://10.0.0.5:6380/2"  # the state's key: no credentials
    state = settings.feast_dir / "materialized.json"
    state.parent.mkdir(parents=True)
    state.write_text(
        json.dumps({"sqlite:/old/online_store.db": {}, "redis://10.0.0.5:6380/7": {}, "redis://10.0.0.9:6379/0": {}})
    )
    assert stores_written(settings) == [
        "redis://10.0.0.5:6380/2",
        "redis://10.0.0.5:6380/7",
        "redis://10.0.0.9:6379/0",
        "sqlite:/old/online_store.db",
    ]
    # The configured URL's credentials serve another database of the same server, never another host.
    assert redis_url(settings, "redis://10.0.0.5:6380/7") == "redis://:s3cret@10.0.0.5:6380/7"
    assert redis_url(settings, "redis://10.0.0.9:6379/0") == "redis://10.0.0.9:6379/0"
