"""The feature layer against the real Feast SDK, real SQLite and Redis, and a real feature server.

Nothing of Feast is mocked: Feast's own ``materialize`` is the reference our writer must equal
byte for byte, Feast's SDK reads what we wrote, and the consistency check uses Feast's offline
store over the Delta log.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import re
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from contracts.errors import InputError
from features.encoding import entity_keys
from features.http_api import READ_ROUTES, WRITE_ROUTES, Limits, build_app
from features.materialize import materialize, watermarks
from features.online import get_online_features, reader, views_of
from features.repo.definitions import feature_names, feature_tables, join_key, view_name
from features.store import (
    PROJECT,
    REDIS_PASSWORD_VARIABLE,
    applied_store,
    feast_dir,
    open_store,
    sqlite_path,
    write_config,
)
from tests import feature_lake
from tests.feature_lake import DAY1, DAY2
from tests.services import Redis, free_port, stop_tree
from warehouse.privacy import pseudonym
from warehouse.settings import ConfigError, Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import republish
from warehouse.tables import table

KEY = "test-key-not-a-secret-0123456789"
START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 3, 5, tzinfo=dt.UTC)
ALICE = pseudonym(KEY.encode(), "alice")
BOB = pseudonym(KEY.encode(), "bob")


def _settings(home: Path, lake_dir: Path, **env: str) -> Settings:
    return load_settings(
        {"STRATA_HOME": str(home), "STRATA_LAKE_URI": str(lake_dir), "STRATA_PSEUDONYM_KEY": KEY, **env}
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One lake, our store materialized (home "ours") and Feast's own materialize (home "feast")."""
    root = tmp_path_factory.mktemp("features")
    ours = _settings(root / "ours", root / "lake")
    keys = feature_lake.build(ours, extra_users=(ALICE, BOB))
    report = materialize(ours)
    theirs = _settings(root / "feast", root / "lake")
    store, _ = applied_store(theirs)
    store.materialize(START, END)
    return {"root": root, "ours": ours, "feast": theirs, "keys": keys, "report": report}


def _rows(path: Path, view: str) -> list[tuple]:
    with sqlite3.connect(path) as con:
        return con.execute(
            f"SELECT entity_key, feature_name, value, value_text, vector_value, event_ts, created_ts "
            f'FROM "{PROJECT}_{view}" ORDER BY entity_key, feature_name'
        ).fetchall()


def test_our_sqlite_rows_are_byte_identical_to_feasts(world: dict) -> None:
    assert {v.mode for v in world["report"].views} == {"full"}
    for source in feature_tables():
        ours, theirs = (
            _rows(sqlite_path(world["ours"]), view_name(source)),
            _rows(sqlite_path(world["feast"]), view_name(source)),
        )
        assert len(ours) == len(world["keys"][source.name]) * len(feature_names(source))
        assert ours == theirs
        if any(not source.contract.column(f).required for f in feature_names(source)):
            assert any(r[2] == b"" and r[3] is None for r in ours)  # nulls are stored as Feast stores them


def test_applying_again_is_a_no_op(world: dict) -> None:
    """The registry materialize applied is left as it is (its time is measured by ``make bench BENCH=features``)."""
    registry = feast_dir(world["ours"]) / "registry.db"
    before = registry.read_bytes()
    store, applied = applied_store(world["ours"])
    assert not applied and registry.read_bytes() == before
    assert sorted(v.name for v in store.list_feature_views()) == sorted(view_name(s) for s in feature_tables())


def test_batched_reader_returns_what_the_sdk_returns(world: dict) -> None:
    store, _ = applied_store(world["ours"])
    for source in feature_tables():
        view = views_of(view_name(source))[0]
        keys = [*world["keys"][source.name][:40], "nobody-at-all"]
        features = list(view.features[:20])
        sdk = store.get_online_features(
            features=[f"{view.name}:{f}" for f in features], entity_rows=[{view.key: k} for k in keys]
        ).to_dict()
        ours, times = reader(world["ours"]).read(view, keys, features)
        assert ours == sdk
        assert times[-1] is None and times[0] is not None and times[0].tzinfo is not None
    values = get_online_features(world["ours"], "user", "alice")
    assert len(views_of("user")) == 2  # the user's features and the batch scores, read together
    assert values == {
        f: v[0]
        for view in views_of("user")
        for f, v in reader(world["ours"]).read(view, [ALICE])[0].items()
        if f != "user_pseudonym"
    }


def test_a_rebuilt_partition_is_materialized_again_and_read_offline(world: dict) -> None:
    settings = world["ours"]
    source = table("dws.user_features")
    keys = world["keys"][source.name]
    only_day1, both_days = keys[-2], keys[0]  # the first half has a newer row on day 2
    before = reader(settings).read(views_of("user")[0], [only_day1, both_days], ["request_count_24h"])[0]
    republish(
        Lake(settings),
        source,
        lambda f: f.with_columns(pl.col("request_count_24h") + 1000),
        partitions=[{"event_date": DAY1}],
    )
    report = materialize(settings)
    run = next(v for v in report.views if v.view == "user_features")
    assert (run.mode, run.partitions, run.entities) == ("incremental", [DAY1.isoformat()], len(keys))
    assert next(v for v in report.views if v.view == "tenant_features").mode == "unchanged"
    after = reader(settings).read(views_of("user")[0], [only_day1, both_days], ["request_count_24h"])[0]
    assert after["request_count_24h"] == [before["request_count_24h"][0] + 1000, before["request_count_24h"][1]]
    assert watermarks(settings)["user_features"]["version"] == Lake(settings).version(source)

    # Offline, through Feast's duckdb store over the Delta log: only the new values, and an entity
    # row with nothing within the TTL comes back with nulls, not dropped.
    import pandas as pd

    store, _ = applied_store(settings)
    at = pd.Timestamp(dt.datetime.combine(DAY1, dt.time(23, 59), dt.UTC))
    frame = (
        store.get_historical_features(
            entity_df=pd.DataFrame({"user_pseudonym": [only_day1, "nobody"], "event_timestamp": [at, at]}),
            features=["user_features:request_count_24h"],
        )
        .to_df()
        .set_index("user_pseudonym")
    )
    assert frame.loc[only_day1, "request_count_24h"] == after["request_count_24h"][0]
    assert pd.isna(frame.loc["nobody", "request_count_24h"]) and len(frame) == 2


def test_an_older_row_never_replaces_a_newer_online_value(world: dict) -> None:
    settings = world["ours"]
    source = table("dws.user_features")
    key = world["keys"][source.name][0]
    newest = reader(settings).read(views_of("user")[0], [key])[1][0]
    materialize(settings, start=START, end=dt.datetime.combine(DAY2, dt.time(), dt.UTC))  # day 1 only
    assert reader(settings).read(views_of("user")[0], [key])[1][0] == newest


def test_redis_matches_feasts_layout_and_reads_back(world: dict, redis_server: Redis) -> None:
    import redis

    with redis_server.databases(10, 11) as (ours_url, feast_url):
        ours = _settings(world["root"] / "ours-redis", world["root"] / "lake", STRATA_ONLINE_STORE=ours_url)
        theirs = _settings(world["root"] / "feast-redis", world["root"] / "lake", STRATA_ONLINE_STORE=feast_url)
        materialize(ours)
        store, _ = applied_store(theirs)
        store.materialize(START, END)
        a, b = redis.Redis.from_url(ours_url), redis.Redis.from_url(feast_url)
        keys = sorted(a.keys())
        entities = {(join_key(t), k) for t in feature_tables() for k in world["keys"][t.name]}  # one hash each
        assert keys == sorted(b.keys()) and len(keys) == len(entities)
        assert all(a.hgetall(k) == b.hgetall(k) for k in keys)
        view = views_of("user")[0]
        users = [*world["keys"]["dws.user_features"][:30], "nobody"]
        ours_store, _ = applied_store(ours)
        sdk = ours_store.get_online_features(
            features=[f"{view.name}:{f}" for f in view.features], entity_rows=[{view.key: k} for k in users]
        ).to_dict()
        assert reader(ours).read(view, users)[0] == sdk
        newest = reader(ours).read(view, users[:1])[1][0]
        materialize(ours, start=START, end=dt.datetime.combine(DAY2, dt.time(), dt.UTC))  # older rows
        assert reader(ours).read(view, users[:1])[1][0] == newest
        assert all(a.hgetall(k) == b.hgetall(k) for k in keys)

        # Forget reaches Redis: the user's hash is gone, nobody else's.
        from strata import pipeline

        assert BOB.encode() in b"".join(keys)
        result = pipeline.forget(ours, "bob")
        assert result.counts["online_redis_removed"] == 1
        left = a.keys()
        assert len(left) == len(keys) - 1 and not any(BOB.encode() in k for k in left)


def test_consistency_is_clean_then_finds_a_planted_skew(world: dict) -> None:
    settings = world["ours"]
    from features.consistency import check_consistency

    clean = check_consistency(settings, DAY2, sample=10_000)
    assert clean.mismatches == 0 and clean.missing == 0
    # The store reflects DAY2 now: the check of the day before can no longer be made.
    with pytest.raises(InputError, match="cannot be made again"):
        check_consistency(settings, DAY2 - dt.timedelta(days=1))
    assert {v.view: v.sampled for v in clean.views} == {
        view_name(t): Lake(settings).read_frame(t)[join_key(t)].n_unique() for t in feature_tables()
    }
    written = Lake(settings).read_frame(table("ads.feature_consistency"))
    assert written.height == sum(len(feature_names(t)) + 1 for t in feature_tables())
    assert written["mismatches"].sum() == 0 and written["mismatch_rate"].max() == 0.0

    # Plant a skew: one value of one entity changed in the online store.
    view = views_of("tenant")[0]
    victim = world["keys"]["dws.tenant_features"][0]
    ek = entity_keys(view.key, pa.array([victim]))[0]
    with sqlite3.connect(sqlite_path(settings)) as con:
        changed = con.execute(
            f'UPDATE "{PROJECT}_{view.name}" SET value = ? WHERE entity_key = ? AND feature_name = ?',
            [b")" + struct.pack("<d", 123.25), ek, "latency_p95_ms_24h"],
        ).rowcount
    assert changed == 1
    skewed = check_consistency(settings, DAY2, sample=10_000)
    assert skewed.skewed() == [("tenant_features", "latency_p95_ms_24h", 1)]
    assert skewed.views[1].examples["latency_p95_ms_24h"][0][:2] == (victim, 123.25)
    rows = Lake(settings).read_frame(table("ads.feature_consistency")).filter(pl.col("mismatches") > 0)
    assert sorted(rows.select("feature_view", "feature").rows()) == [
        ("tenant_features", "*"),
        ("tenant_features", "latency_p95_ms_24h"),
    ]


def test_pipeline_steps_and_the_get_command(world: dict) -> None:
    from typer.testing import CliRunner

    from strata import pipeline
    from strata.cli import app

    settings = world["ours"]
    pipeline.materialize(settings, DAY2)  # whatever earlier tests changed (forgetting bob rewrote a partition)
    unchanged = pipeline.materialize(settings, DAY2)
    assert unchanged.counts["values_written"] == 0 and unchanged.versions["dws.user_features"] is not None
    values = pipeline.get_online_features(settings, "user", "alice")
    assert set(values) == set(feature_names(table("dws.user_features"))) | set(
        feature_names(table("ads.user_risk_scores"))
    )  # the user's features and scores, together
    assert values["request_count_1h"] is not None
    result = CliRunner().invoke(
        app,
        ["features", "get", "user=alice", "-f", "request_count_1h,error_rate_7d"],
        env={**settings.to_env(), "COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= 80
    assert str(values["request_count_1h"]) in result.output and "2026-03-0" in result.output
    assert "alice" in result.output and ALICE not in result.output
    unknown = CliRunner().invoke(app, ["features", "get", "user=nobody"], env=settings.to_env())
    assert unknown.exit_code == 1 and "holds nothing for user nobody" in str(unknown.exception)
    assert "—" not in unknown.output  # no page of empty rows


def test_forget_removes_the_users_online_rows(world: dict) -> None:
    from strata import pipeline

    settings = world["ours"]
    path = sqlite_path(settings)
    assert ALICE.encode() in path.read_bytes()
    result = pipeline.forget(settings, "alice")
    assert result.counts["online_sqlite_removed"] == sum(
        len(feature_names(table(t))) for t in ("dws.user_features", "ads.user_risk_scores")
    )
    assert result.counts["dws.user_features_removed"] >= 1
    with sqlite3.connect(path) as con:
        left = con.execute(
            f'SELECT count(*) FROM "{PROJECT}_user_features" WHERE instr(entity_key, ?) > 0', [ALICE.encode()]
        ).fetchone()[0]
        others = con.execute(f'SELECT count(DISTINCT entity_key) FROM "{PROJECT}_user_features"').fetchone()[0]
    # Bob, forgotten in the shared lake by the Redis test, left this store at its next materialization.
    assert left == 0 and others == len(world["keys"]["dws.user_features"]) - 2
    wal = Path(f"{path}-wal")
    assert ALICE.encode() not in path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert all(v is None for v in get_online_features(settings, "user", "alice").values())


def _serve(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # the server holds its own copy
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "strata"), "features", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _call(port: int, method: str, path: str, body: Any = None) -> tuple[int, str]:
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
        response = con.getresponse()
        return response.status, response.read().decode()
    finally:
        con.close()


def _lookup(port: int, body: dict, server: subprocess.Popen[bytes], log: Path, wait: float = 60) -> dict:
    """A lookup once the server answers (it loads Feast first): its JSON answer."""
    deadline = time.monotonic() + wait
    while True:
        try:
            status, text = _call(port, "POST", "/get-online-features", body)
            assert status == 200, text
            return json.loads(text)
        except OSError:  # not listening yet
            assert server.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, f"the feature server did not answer within {wait:.0f} s"
            time.sleep(0.3)


def _answers(port: int) -> bool:
    try:
        return _call(port, "GET", "/health")[0] == 200
    except OSError:
        return False


def test_the_feature_server_serves_over_http_and_dies_whole(world: dict, tmp_path: Path) -> None:
    """Feast's lookups over HTTP, no writes; after ``kill -9`` of the master no worker keeps the port (a
    restart on it works), and nothing is left in the home folder or in /tmp (gunicorn's control
    socket, Feast's metrics folder)."""
    settings = world["ours"]
    port = free_port()
    home, tmp = tmp_path / "user", tmp_path / "tmp"
    home.mkdir(), tmp.mkdir()
    env = {**settings.to_env(), "PATH": str(Path(sys.executable).parent), "HOME": str(home), "TMPDIR": str(tmp)}
    log = tmp_path / "serve.log"
    view = views_of("model_version")[0]
    keys = world["keys"]["dws.model_features"][:3]
    body = {"features": [f"{view.name}:{f}" for f in view.features[:5]], "entities": {view.key: keys}}
    ours = reader(settings).read(view, keys, list(view.features[:5]))[0]
    server = _serve(port, env, log)
    try:
        answer = _lookup(port, body, server, log)
        served = {
            name: result["values"] for name, result in zip(answer["metadata"]["feature_names"], answer["results"])
        }
        assert served == ours
        assert _call(port, "POST", "/write-to-online-store", {})[0] == 404  # reads only (Feast's app: 422)
        server.kill()  # the master, with SIGKILL: it can do nothing about it
        server.wait()
        deadline = time.monotonic() + 10
        while _answers(port):
            assert time.monotonic() < deadline, "a worker still serves the port 10 s after its master was killed"
            time.sleep(0.2)
        server = _serve(port, env, log)
        answer = _lookup(port, body, server, log)
        assert answer["results"][1]["values"] == served[answer["metadata"]["feature_names"][1]]
    finally:
        stop_tree(server)
    assert not (home / ".gunicorn").exists()
    assert not list(tmp.glob("feast_metrics_*"))


def test_a_bad_feature_name_is_refused_and_the_connection_serves_on(world: dict, tmp_path: Path) -> None:
    """An unknown or repeated feature name got a 500 from Feast's app, and the server then dropped the
    keep-alive connection unannounced: the next request on it was reset. Now a 422 naming the feature and
    the known ones, and the same connection answers the next lookup."""
    settings = world["ours"]
    port, log = free_port(), tmp_path / "serve.log"
    env = {**settings.to_env(), "PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    view = views_of("user")[0]
    keys = world["keys"]["dws.user_features"][:2]
    first, second = (f"{view.name}:{f}" for f in view.features[:2])
    good = {"features": [first, second], "entities": {view.key: keys}}
    want = reader(settings).read(view, keys, list(view.features[:2]))[0]
    bad = {
        "an unknown feature": ([first, f"{view.name}:no_such_feature"], "no_such_feature", view.features[0]),
        "an unknown view": (["no_such_view:x"], "no_such_view", view.name),
        "a repeated feature": ([first, first], first, "more than once"),
    }
    server = _serve(port, env, log)
    try:
        _lookup(port, good, server, log)
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        con.connect()
        sock = con.sock
        for what, (features, names, known) in bad.items():
            for body in ({**good, "features": features}, good):
                con.request("POST", "/get-online-features", json.dumps(body), {"Content-Type": "application/json"})
                response = con.getresponse()
                answer = json.loads(response.read())
                assert con.sock is sock, f"after {what}: the connection was closed"
                if body is good:
                    assert response.status == 200, (what, answer)
                    served = dict(zip(answer["metadata"]["feature_names"], (r["values"] for r in answer["results"])))
                    assert served == want, what
                else:
                    assert response.status == 422, (what, answer)
                    assert names in answer["detail"] and known in answer["detail"], (what, answer)
        con.close()
    finally:
        stop_tree(server)


def test_a_failing_online_store_gets_a_500_and_the_connection_serves_on(world: dict) -> None:
    """An error Feast's app raises (here its Redis is down) was answered with a 500 and the connection then
    dropped unannounced (the next request on it: RemoteDisconnected); now the connection serves on."""
    down = f"redis://127.0.0.1:{free_port()}/0"
    settings = _settings(world["root"] / "redis-down", world["root"] / "lake", STRATA_ONLINE_STORE=down)
    store, _ = applied_store(settings)
    view = views_of("user")[0]
    lookup = {"features": [f"{view.name}:{view.features[0]}"], "entities": {view.key: ["k"]}}
    with _listening(build_app(store)) as port:
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        con.request("POST", "/get-online-features", json.dumps(lookup), {"Content-Type": "application/json"})
        response = con.getresponse()
        assert (response.status, "Connection refused" in response.read().decode()) == (500, True)
        sock = con.sock
        con.request("GET", "/health")
        assert con.getresponse().status == 200 and con.sock is sock
        con.close()


@contextmanager
def _listening(app: Any) -> Iterator[int]:
    """``app`` served over HTTP by uvicorn in a thread (its lifespan run as under gunicorn); the port."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the app did not start"
            time.sleep(0.05)
        yield server.config.port
    finally:
        server.should_exit = True
        thread.join(10)


def _probe(port: int, route: Any) -> list[int]:
    """What each method of one of Feast's routes answers (a path parameter filled with ``x``)."""
    path = re.sub(r"{[^}]+}", "x", route.path)
    if not hasattr(route, "methods"):  # the static files' mount, the chat's websocket
        return [_call(port, "GET", f"{path}/chat/index.html" if hasattr(route, "routes") else path)[0]]
    return [_call(port, method, path, {})[0] for method in route.methods]


def test_the_feature_server_answers_lookups_only_and_refuses_bad_ones_with_4xx(world: dict) -> None:
    """The attacker's view: every route of Feast's app is tried; only the lookup and the health
    check answer unless writes are allowed. Oversized bodies, too many entities and values of the
    wrong type get a 4xx saying why (Feast's app answered 200, or a 500), a good lookup Feast's answer."""
    from feast.feature_server import get_app

    store, _ = applied_store(world["ours"])
    every = get_app(store).routes
    assert {
        "/write-to-online-store",
        "/materialize",
        "/push",
        "/materialize-incremental",
        "/chat",
        "/ws/chat",
        "/static",
    } <= {r.path for r in every}
    view = views_of("user")[0]
    keys = world["keys"]["dws.user_features"][:2]
    lookup = {"features": [f"{view.name}:{f}" for f in view.features[:3]], "entities": {view.key: keys}}
    refused = {
        "a body over the limit": ({**lookup, "pad": "x" * 5000}, 413, "over the limit of 4,096 bytes"),
        "too many entities": ({**lookup, "entities": {view.key: ["k"] * 51}}, 413, "at most 50"),
        "a number for a string key": ({**lookup, "entities": {view.key: [7]}}, 422, "takes str values"),
        "a null key": ({**lookup, "entities": {view.key: [None]}}, 422, "takes str values, not null"),
        "an unknown key": ({**lookup, "entities": {"user": keys}}, 422, "unknown entity key"),
        "the wrong key": ({**lookup, "entities": {"tenant_id": ["t"]}}, 422, "need the entity key"),
        "keys of unequal length": (
            {**lookup, "entities": {view.key: keys, "tenant_id": ["t"]}},
            422,
            "differ in length",
        ),
        "no features": ({"entities": {view.key: keys}}, 422, "name the features"),
    }
    for allow_writes in (False, True):
        app = build_app(store, allow_writes=allow_writes, limits=Limits(max_body=4096, max_entities=50))
        served = READ_ROUTES | (WRITE_ROUTES if allow_writes else frozenset())
        assert {(r.path, m) for r in app.routes for m in r.methods} == served
        with _listening(app) as port:
            for route in every:
                answers = _probe(port, route)
                wanted = {(route.path, m) for m in getattr(route, "methods", ())} & served
                assert all((a not in (404, 405)) == bool(wanted) for a in answers), (route.path, answers)
            status, text = _call(port, "POST", "/get-online-features", lookup)
            assert status == 200 and json.loads(text)["results"][0]["values"] == keys
            for what, (body, status, says) in refused.items():
                answer = _call(port, "POST", "/get-online-features", body)
                assert (answer[0], says in json.loads(answer[1])["detail"]) == (status, True), (what, answer)


def test_end_to_end_from_generated_logs(tmp_path: Path) -> None:
    """Generated logs → ODS → DWD → DWS → materialize → lookups and a clean consistency check."""
    from strata import pipeline
    from synthetic_workload import generate

    settings = _settings(tmp_path / "home", tmp_path / "home" / "lake")
    landing = tmp_path / "landing"
    manifest = generate(landing, days=2, requests_per_day=400, seed=5, start=dt.date(2026, 1, 1), fault_rate=0.0)
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    days = [dt.date.fromisoformat(d) for d in manifest["days"]]
    for day in days:
        pipeline.build_dwd(settings, day)
        pipeline.build_dws(settings, day)
    result = pipeline.materialize(settings, days[-1])
    users = Lake(settings).read_frame(table("dws.user_features"))
    assert result.counts["user_features_entities"] == users["user_pseudonym"].n_unique() > 0
    latest = users.sort("feature_ts").group_by("user_pseudonym").last()
    row = latest.row(0, named=True)
    online = get_online_features(settings, "user", row["user_pseudonym"], pseudonymize=False)
    assert online == {f: row[f] for f in feature_names(table("dws.user_features"))} | {
        f: None for f in feature_names(table("ads.user_risk_scores"))
    }  # nothing scored yet
    check = pipeline.check_consistency(settings, days[-1])
    assert check.counts["mismatches"] == 0 and check.counts["missing"] == 0 and check.counts["entities_sampled"] > 0


def test_training_sets_by_duckdb_equal_feasts(world: dict) -> None:
    """The as-of join an object-store lake uses gives what Feast's offline store gives."""
    from features.retrieval import historical_features

    keys = [*world["keys"]["dws.user_features"][:40], "nobody"]
    instants = [
        dt.datetime.combine(DAY1, dt.time(12), dt.UTC),
        dt.datetime.combine(DAY2, dt.time(23, 59), dt.UTC),
        dt.datetime.combine(DAY2 + dt.timedelta(days=9), dt.time(6), dt.UTC),
    ]  # past the TTL
    rows = pl.DataFrame(
        {"user_pseudonym": [k for k in keys for _ in instants], "event_timestamp": [t for _ in keys for t in instants]}
    )
    feast = historical_features(world["ours"], rows, "user_risk_v1", engine="feast")
    duck = historical_features(world["ours"], rows, "user_risk_v1", engine="duckdb")
    assert feast.features == duck.features and feast.source_table == duck.source_table == "dws.user_features"
    order = ["user_pseudonym", "event_timestamp"]
    a = feast.frame.with_columns(pl.col("event_timestamp").dt.convert_time_zone("UTC")).sort(order)
    b = duck.frame.sort(order)
    assert a.height == b.height == rows.height
    assert b["request_count_24h"].null_count() > len(keys)  # the third instant (and "nobody") found nothing
    for name in feast.features:
        left, right = a[name].cast(pl.Float64).to_list(), b[name].cast(pl.Float64).to_list()
        assert [x is None for x in left] == [x is None for x in right], name
        assert [x for x in left if x is not None] == pytest.approx([x for x in right if x is not None]), name


def test_the_sources_name_the_stores_endpoint_only_for_a_lake_on_it(tmp_path: Path) -> None:
    from features.repo.definitions import definitions

    endpoint = {"STRATA_HOME": str(tmp_path), "STRATA_S3_ENDPOINT_URL": "http://127.0.0.1:9000"}
    for lake_uri, expected in (("s3://lake/strata", "http://127.0.0.1:9000"), (str(tmp_path / "lake"), None)):
        objects = definitions(load_settings({**endpoint, "STRATA_LAKE_URI": lake_uri}))
        sources = [o.batch_source for o in objects if hasattr(o, "batch_source") and o.batch_source is not None]
        assert sources and {s.s3_endpoint_override or None for s in sources} == {expected}


def test_the_feast_config_names_the_redis_password_and_feast_reads_it_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REDIS_PASSWORD_VARIABLE, "stale")  # the settings win; restored afterwards
    password = "s3cret-pw$HOME"  # a '$' in it is not expanded either
    settings = load_settings(
        {"STRATA_HOME": str(tmp_path), "STRATA_ONLINE_STORE": f"redis://app:{password}@127.0.0.1:6379/11"}
    )
    store = open_store(settings)
    assert password not in (tmp_path / "feast" / "feature_store.yaml").read_text()
    assert store.config.online_store.connection_string == f"127.0.0.1:6379,db=11,username=app,password={password}"
    with pytest.raises(ConfigError, match="password with a comma"):
        write_config(load_settings({"STRATA_HOME": str(tmp_path), "STRATA_ONLINE_STORE": "redis://:a,b@127.0.0.1/11"}))
