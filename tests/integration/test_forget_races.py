"""Forget wins every race: against scoring, materialization, the DWS and ADS builds and the report, in both lock
backends.

Each step runs as a real process that stops (SIGSTOP, ``STRATA_PAUSE_AT_READ``) right after its
first read, holding what it read. There, forget's locks must be taken (a forget waits for the
step); then a real ``forget`` starts, the step goes on, and afterwards the user is nowhere: in
no file under ``STRATA_HOME`` (the landing zone included; Parquet and gzip decoded), in no key
of the Redis the home materialized to before its configuration moved to SQLite. One lake is
built per module and copied per case (the landing zone, whose paths ODS keeps, is shared); the
five steps run side by side, each in its own home and lock backend.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import polars as pl
import psutil
import pytest
from lake_compare import assert_no_trace

from strata import pipeline
from synthetic_workload import generate
from tests.services import Postgres, Redis
from warehouse.ops.forget import searched_tables
from warehouse.privacy import pseudonym
from warehouse.settings import Settings, load_settings
from warehouse.storage import locks
from warehouse.storage.lake import Lake
from warehouse.tables import table

DAYS = [dt.date(2026, 3, 1), dt.date(2026, 3, 2)]
KEY = "test-key-not-a-secret-0123456789"
REDIS_DB = 13
#: Each step's command and the name its first read pauses at.
STEPS = {
    "score": ["model", "score", "--date", str(DAYS[1]), "--provider", "cpu"],
    "materialize": ["features", "materialize", "--full"],
    "build dws": ["build", "dws", "--date", str(DAYS[1])],
    "build ads": ["build", "ads", "--date", str(DAYS[1])],
    "report": ["report", "--end", str(DAYS[1])],
}


#: The landing zone, shared by every home of the module (ODS keeps each file's absolute path).
LANDING: dict[str, Path] = {}


def _env(home: Path, **more: str) -> dict[str, str]:
    return {"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY, "STRATA_LANDING_DIR": str(LANDING["dir"]), **more}


def _train(settings: Settings) -> None:
    from batch_inference.training import TrainingSet, fit_and_register

    source = table("dws.user_features")
    rows = Lake(settings).read_frame(source)
    names = [c.name for c in source.contract.columns if c.name.endswith(("_1h", "_24h", "_7d"))]
    frame = rows.with_columns(event_timestamp=pl.col("feature_ts"), label=(pl.int_range(pl.len()) % 2).cast(pl.Int8))
    fit_and_register(
        settings,
        "user_risk",
        TrainingSet(frame, "user_pseudonym", names, "user_risk_v1", source.name, dt.timedelta(days=8)),
        split_at=frame.get_column("event_timestamp").sort()[frame.height // 2],
        window=(DAYS[1], DAYS[1]),
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, redis_server: Redis):
    """A home with every layer built, scored, materialized to Redis and then (configured so now) to SQLite."""
    import redis

    root = tmp_path_factory.mktemp("forget-races")
    base = root / "base"
    LANDING["dir"] = root / "landing"
    with redis_server.databases(REDIS_DB) as (redis_url,):
        settings = load_settings(_env(base))
        generate(settings.landing_dir, days=2, requests_per_day=60, seed=5, start=DAYS[0], fault_rate=0.05)
        pipeline.land(settings, [settings.landing_dir / "requests", settings.landing_dir / "feedback"])
        pipeline.load_prices(settings, settings.landing_dir / "prices.csv")
        for day in DAYS:
            pipeline.build_dwd(settings, day)
        pipeline.build_dws(settings, DAYS[1])
        _train(settings)
        pipeline.score(settings, DAYS[1], provider="cpu")  # materializes to SQLite (the configured store)
        pipeline.materialize(load_settings(_env(base, STRATA_ONLINE_STORE=redis_url)))  # a store used before
        scored = set(Lake(settings).read_frame(table("ads.user_risk_scores")).get_column("user_pseudonym"))
        victim = next(u for u in _raw_users(settings.landing_dir) if pseudonym(KEY.encode(), u) in scored)
        client = redis.Redis.from_url(redis_url)
        dump = {k: client.dump(k) for k in client.keys()}  # noqa: SIM118 - Redis KEYS, not a dict
        yield {"root": root, "base": base, "victim": victim, "redis": redis_url, "dump": dump}


def _raw_users(landing: Path) -> list[str]:
    import gzip

    users: list[str] = []
    for path in sorted((landing / "requests").rglob("*.jsonl.gz")):
        for line in gzip.decompress(path.read_bytes()).splitlines():
            try:
                user = json.loads(line).get("user_id")
            except (ValueError, AttributeError):
                continue
            if isinstance(user, str) and user and user not in users:
                users.append(user)
    return users


def _copy(base: Path, home: Path) -> None:
    """A copy of the home, its materialization state pointing at its own SQLite file (as a moved home would)."""
    shutil.copytree(base, home)
    state = home / "feast" / "materialized.json"
    if state.exists():
        state.write_text(state.read_text().replace(str(base), str(home)))


def _assert_nowhere(home: Path, redis_url: str, texts: list[str]) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    held = b"".join(
        k + (b"".join(client.hgetall(k).values()) if client.type(k) == b"hash" else client.dump(k) or b"")
        for k in client.keys()  # noqa: SIM118 - Redis KEYS, not a dict
    )
    for text in texts:
        assert_no_trace(home, text)  # the lake, the landing zone, the online SQLite file, scratch
        assert text.encode() not in held, f"{text!r} is still in Redis"


def _stopped(proc: subprocess.Popen[str], step: str) -> None:
    deadline = time.monotonic() + 120
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        if proc.poll() is not None:
            raise AssertionError(f"{step} ended before its first read: {proc.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, f"{step} never reached its first read"
        time.sleep(0.05)


def _race(world: dict, step: str, home: Path, lock_env: dict[str, str]) -> None:
    env = {**os.environ, **_env(home, **lock_env), "STRATA_LOCK_WAIT": "300"}
    cli = [sys.executable, "-m", "strata.cli"]
    runner = subprocess.Popen(
        [*cli, *STEPS[step]],
        env={**env, "STRATA_PAUSE_AT_READ": step},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _stopped(runner, step)
        # Paused after its first read, the step holds a lock forget needs: a forget now has to wait.
        settings = load_settings({**_env(home, **lock_env), "STRATA_LOCK_WAIT": "0"})
        with pytest.raises(locks.LockHeld), locks.hold(settings, write=[(t, None) for t in searched_tables()]):
            pass
        forget = subprocess.Popen(
            [*cli, "forget", "--user", world["victim"]],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        runner.send_signal(18)  # SIGCONT
        for proc, name in ((runner, step), (forget, "forget")):
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"{name}: {err[-2000:]}"
    finally:
        if runner.poll() is None:
            runner.kill()


#: Every step in both lock backends: half of the pairs in ``make test`` (each step once, each
#: backend twice), the other half with the slow tests.
MIXED = {"score": "files", "materialize": "postgres", "build dws": "files", "build ads": "postgres", "report": "files"}
OTHERS = {step: "postgres" if backend == "files" else "files" for step, backend in MIXED.items()}


@pytest.mark.parametrize("backends", [MIXED, pytest.param(OTHERS, marks=pytest.mark.slow)], ids=["mixed", "others"])
def test_forget_wins_against_every_step_paused_after_its_first_read(
    world: dict, backends: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import redis

    victim = world["victim"]
    texts = [victim, pseudonym(KEY.encode(), victim)]
    with ExitStack() as stack:
        homes = {step: tmp_path / step.replace(" ", "-") for step in STEPS}
        lock_envs: dict[str, dict[str, str]] = {step: {} for step in STEPS}
        for step in STEPS:
            if backends[step] == "postgres":  # one database per home: advisory locks are per database
                server: Postgres = request.getfixturevalue("postgres_server")
                name = stack.enter_context(server.database("strata_forget_race_"))
                lock_envs[step] = {"STRATA_LOCK_URL": server.url(name)}
        for home in homes.values():
            _copy(world["base"], home)
        client = redis.Redis.from_url(world["redis"])
        client.flushdb()
        for key, value in world["dump"].items():
            client.restore(key, 0, value)
        with ThreadPoolExecutor(len(STEPS)) as pool:
            for done in [pool.submit(_race, world, step, homes[step], lock_envs[step]) for step in STEPS]:
                done.result()
        for step, home in homes.items():
            try:
                _assert_nowhere(home, world["redis"], texts)
                for text in texts:
                    assert_no_trace(LANDING["dir"], text)
            except AssertionError as exc:
                raise AssertionError(f"after forget raced {step}: {exc}") from exc
