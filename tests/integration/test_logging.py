"""The log of a full small pipeline: each step's start, progress and counts at INFO with no progress
callback (a scheduler's task), and never a secret, a raw line or a user id, raw or pseudonymized, at
any level from any logger."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata import pipeline
from synthetic_workload import generate
from tests.small_model import register_a_model
from warehouse.privacy import pseudonym
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_REQUEST

DAY = dt.date(2026, 1, 5)
KEY = "log-test-key-never-to-be-logged-0123"


class _Everything(logging.Handler):
    """Every record of every logger, formatted as a handler would write it (traceback included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.records: list[tuple[logging.LogRecord, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record, self.format(record)))


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Path, list[str], _Everything]]:
    """A generated day through every step, the root logger at DEBUG; the settings, the generated folder,
    the pseudonyms dwd.request held, and the records."""
    root, handler = logging.getLogger(), _Everything()
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        out = tmp_path_factory.mktemp("generated")
        home = tmp_path_factory.mktemp("home")
        settings = load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY})
        manifest = generate(out, days=1, requests_per_day=200, seed=3, start=DAY, fault_rate=0.03)
        pipeline.land(settings, [out / "requests", out / "feedback"])
        pipeline.build_dwd(settings, DAY)
        pipeline.build_dws(settings, DAY)
        pipeline.materialize(settings, DAY)
        pipeline.check_consistency(settings, DAY, sample=50)
        register_a_model(settings, DAY, DAY)
        pipeline.score(settings, DAY, provider="cpu")
        pseudonyms = Lake(settings).read_frame(DWD_REQUEST).get_column("user_pseudonym").drop_nulls().to_list()
        pipeline.forget(settings, (manifest["abusive_user_ids"] or [_users(out)[0]])[0])
        pipeline.apply_retention(settings, days=1, today=DAY + dt.timedelta(days=3))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    yield settings, out, pseudonyms, handler


def _lines(out: Path) -> list[str]:
    """Every line of the generated logs and feedback, as text."""
    lines = []
    for path in sorted(out.rglob("*.jsonl.gz")):
        lines += gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace").splitlines()
    return [line for line in lines if line.strip()]


def _users(out: Path) -> list[str]:
    users = set()
    for line in _lines(out):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("user_id"), str):
            users.add(record["user_id"])
    return sorted(users)


def test_every_step_logs_its_start_and_its_counts_at_info(
    captured: tuple[Settings, Path, list[str], _Everything],
) -> None:
    *_, handler = captured
    info = [
        text for record, text in handler.records if record.levelno == logging.INFO and record.name.startswith("strata.")
    ]
    for step, counts in (
        ("land", "files_landed="),
        ("build_dwd 2026-01-05", "request_published="),
        ("build_dws 2026-01-05", "user_features_rows="),
        ("materialize 2026-01-05", "values_written="),
        ("check_consistency 2026-01-05", "entities_sampled="),
        ("score 2026-01-05", "entities="),
        ("forget", "dwd.request_removed="),
        ("apply_retention 2026-01-08", "ods.request_log_raw_deleted="),
    ):
        assert any(f"strata.pipeline {step}: started" in line for line in info), step
        assert any(f"strata.pipeline {step}: done in " in line and counts in line for line in info), (step, counts)
    # progress, with no callback given: each table as it is built, from the library
    assert any("build_dwd 2026-01-05: dwd.request " in line and "(100%)" in line for line in info)
    assert any(
        line.startswith("INFO strata.warehouse.ods.ingest ods.request_log_raw version 0: landed ") for line in info
    )
    assert any(line.startswith("INFO strata.batch_inference.training registered user_risk v1") for line in info)


def test_no_secret_raw_line_or_user_id_is_logged(captured: tuple[Settings, Path, list[str], _Everything]) -> None:
    _, out, pseudonyms, handler = captured
    users = _users(out)
    lines = _lines(out)
    assert len(users) > 50 and len(pseudonyms) > 150 and len(lines) > 200 and len(handler.records) > 100
    # every pseudonym the key gives, the forgotten user's among them; every line, parsed or not
    secret = {KEY} | set(users) | set(pseudonyms) | {pseudonym(KEY.encode(), u) for u in users} | set(lines)
    leaks = [(text, s) for _, text in handler.records for s in secret if s in text]
    assert not leaks, f"{len(leaks)} leak(s), e.g. {leaks[0]}"
