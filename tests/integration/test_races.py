"""Two commands at once, as real processes with random delays: the tables equal a serial run.

Pairs: ingest × ingest of the same files, build × build of the same new date, build × forget,
ingest × retention, builds of two different dates. Each racer waits for the other's locks
(``--wait``). Where the two orders differ (forget before or after a build), the outcome must
equal one of them; forget must leave no trace in any file either way. ``make test`` runs one
round of each pair; ``make test-all`` runs several.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lake_compare import assert_no_trace, contents, differences

from strata import pipeline
from synthetic_workload import generate
from warehouse.settings import Settings, load_settings
from warehouse.storage import audit
from warehouse.storage.lake import Lake
from warehouse.tables import OPS_BOOKS

TODAY = dt.datetime.now(dt.UTC).date()
DAYS = [TODAY - dt.timedelta(days=3), TODAY - dt.timedelta(days=2)]  # the first one older than the retention
KEY = "test-key-not-a-secret-0123456789"


def _settings(home: Path) -> Settings:
    return load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("races")
    data = root / "data"
    generate(data, days=2, requests_per_day=60, seed=4, start=DAYS[0], fault_rate=0.05)
    landing = [data / "requests", data / "feedback"]
    # The first user in the hourly files, in name order (an hour may hold only service accounts' requests).
    victim = next(
        json.loads(line)["user_id"]
        for path in sorted((data / "requests").rglob("*.jsonl.gz"))
        for line in gzip.decompress(path.read_bytes()).splitlines()
        if line.startswith(b"{") and b'"user_id"' in line and line.endswith(b"}") and json.loads(line).get("user_id")
    )
    ingested = root / "ingested"
    pipeline.land(_settings(ingested), landing)
    pipeline.load_prices(_settings(ingested), data / "prices.csv")
    empty = root / "empty"
    empty.mkdir()
    steps: dict[str, tuple[list[str], Callable[[Settings], object]]] = {
        "ingest": (["ingest", *map(str, landing)], lambda s: pipeline.land(s, landing)),
        "build": (["build", "dwd", "--date", str(DAYS[0])], lambda s: pipeline.build_dwd(s, DAYS[0])),
        "build2": (["build", "dwd", "--date", str(DAYS[1])], lambda s: pipeline.build_dwd(s, DAYS[1])),
        "forget": (["forget", "--user", victim], lambda s: pipeline.forget(s, victim)),
        "retention": (["retention", "apply", "--days", "2"], lambda s: pipeline.apply_retention(s, days=2)),
    }
    return {"root": root, "homes": {"empty": empty, "ingested": ingested}, "steps": steps, "victim": victim}


PAIRS = [
    ("ingest", "ingest", "empty"),
    ("build", "build", "ingested"),
    ("build", "forget", "ingested"),
    ("ingest", "retention", "empty"),
    ("build", "build2", "ingested"),
]


def _serial(world: dict, base: str, order: tuple[str, str], where: Path) -> dict[str, object]:
    shutil.copytree(world["homes"][base], where)
    for name in order:
        world["steps"][name][1](_settings(where))
    return contents(_settings(where))


def _race(world: dict, pair: tuple[str, str], home: Path, rng: random.Random) -> None:
    env = {**os.environ, "STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY, "STRATA_LOCK_WAIT": "300"}
    procs = []
    for name in pair:
        time.sleep(rng.uniform(0, 0.6))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "strata.cli", *world["steps"][name][0]],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err


def _rounds(request: pytest.FixtureRequest) -> int:
    return 1 if request.config.getoption("-m") == "not slow" else 4


@pytest.mark.parametrize(("first", "second", "base"), PAIRS, ids=[f"{a}-{b}" for a, b, _ in PAIRS])
def test_two_commands_at_once_equal_one_after_the_other(
    world: dict, first: str, second: str, base: str, request: pytest.FixtureRequest
) -> None:
    work = world["root"] / f"{first}-{second}"
    serial = [_serial(world, base, (first, second), work / "serial-ab")]
    if first != second:
        serial.append(_serial(world, base, (second, first), work / "serial-ba"))
    rng = random.Random(f"{first}-{second}")
    for round_ in range(_rounds(request)):
        home = work / f"race-{round_}"
        shutil.copytree(world["homes"][base], home)
        _race(world, (first, second), home, rng)
        raced = contents(_settings(home))
        assert any(not differences(raced, s) for s in serial), [differences(raced, s) for s in serial]
        if "forget" in (first, second):
            assert_no_trace(home / "lake", world["victim"])


def test_a_recovery_never_trips_on_the_notes_other_writers_leave_and_drop(tmp_path: Path) -> None:
    """Every write leaves an attempt note before it writes and drops it once its audit row is in; a
    command starting meanwhile lists those notes to recover the ones whose writer died. Writers here
    begin and end attempts without pause while recoveries run beside them: none may fail on a note
    half written or just dropped, and a live writer's note is never taken for a dead one's."""
    settings = _settings(tmp_path)
    deadline, errors, recovered, attempts = time.monotonic() + 3, [], [], [0]

    def write() -> None:
        while time.monotonic() < deadline:
            audit.Attempt(Lake(settings), OPS_BOOKS, f"event_date={dt.date(2026, 1, 1)}").begin().end("failed", None)
            attempts[0] += 1

    def recover() -> None:
        while time.monotonic() < deadline:
            try:
                recovered.append(audit.recover(Lake(settings)))
            except Exception as exc:  # collected for the assertion
                errors.append(repr(exc))

    threads = [threading.Thread(target=write), threading.Thread(target=recover)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert len(recovered) > 10 and attempts[0] > 10 and sum(recovered) == 0
    # A note its writer died writing (never renamed into place) goes once it is old; a fresh one stays.
    notes = Path(settings.lake_uri) / "ops" / "_attempts"
    stale, fresh = notes / "dead.json.part", notes / "writing.json.part"
    stale.write_text('{"id": "de')
    fresh.write_text('{"id": "wr')
    os.utime(stale, (time.time() - audit.ABANDONED_AFTER.total_seconds() - 60,) * 2)
    assert audit.recover(Lake(settings)) == 0 and not stale.exists() and fresh.exists()
