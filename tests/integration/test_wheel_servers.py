"""The servers from the wheels, whatever the machine runs: the path a machine without Postgres and
Redis takes, kept working while the machine's servers are up."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psutil
import psycopg
import pyarrow as pa

from features.materialize import encode, writer
from features.online import reader, views_of
from tests.services import wheel_postgres, wheel_redis
from warehouse.settings import load_settings
from warehouse.storage import locks
from warehouse.tables import DWD_REQUEST


def test_the_wheel_servers_hold_strata_locks_and_online_features_then_leave_no_process(strata_env: Path) -> None:
    view = views_of("user")[0]
    feature = view.features[0]
    at = dt.datetime(2026, 3, 2, 13, tzinfo=dt.UTC)
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # the run's own servers, if any
    with wheel_postgres() as postgres, wheel_redis() as redis:
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        assert {p.name() for p in started} >= {"postgres", "redis-server"}
        with postgres.database("strata_wheel_") as name:
            settings = load_settings(
                {
                    "STRATA_HOME": str(strata_env),
                    "STRATA_LOCK_URL": postgres.url(name),
                    "STRATA_ONLINE_STORE": f"{redis.url}/0",
                }
            )
            with locks.hold(settings, write=[(DWD_REQUEST, {"event_date": "2026-03-02"})]):
                with psycopg.connect(postgres.url(name)) as con:  # another session sees the advisory lock
                    held = con.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
                assert held is not None and held[0] >= 1
            locks._held.backends.clear()  # this process's lock connection, before the database goes
            sink = writer(settings, view.name, [feature])
            batch = pa.record_batch({view.key: ["u1"], feature: pa.array([2.5]), "feature_ts": [at]})
            assert sink.write(encode(batch, view.key, [feature], texts=False)) == 1
            sink.close()
            assert reader(settings).read(view, ["u1", "nobody"], [feature]) == (
                {view.key: ["u1", "nobody"], feature: [2.5, None]},
                [at, None],
            )
    assert not [p for p in started if p.is_running()]  # every server process stopped, none orphaned
