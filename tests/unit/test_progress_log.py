"""Progress that logs: a few INFO lines per table however often work reports, every call passed on."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from strata.pipeline import _described
from warehouse.progress import logged


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_start_each_tenth_at_most_every_ten_seconds_and_the_end_at_info(caplog: pytest.LogCaptureFixture) -> None:
    log, clock, forwarded = logging.getLogger("strata.test.progress"), _Clock(), []
    step = logged(log, "build_dwd 2026-01-05", lambda *call: forwarded.append(call), clock=clock)
    with caplog.at_level(logging.DEBUG, logger="strata.test.progress"):
        for done in range(1, 101):  # a call per 1 %, one a second: a tenth takes ten seconds
            clock.now = float(done)
            step("dwd.request", done * 1_000, 100_000)
        for done in range(1, 6):  # a second table, all at once
            step("dwd.feedback", done, 5)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    request = [
        f"build_dwd 2026-01-05: dwd.request {n:,} of 100,000 ({n // 1000}%)"
        for n in (1_000, *range(11_000, 100_000, 10_000), 100_000)
    ]
    assert info == [
        *request,
        "build_dwd 2026-01-05: dwd.feedback 1 of 5 (20%)",  # 20 % a call, but no 10 s
        "build_dwd 2026-01-05: dwd.feedback 5 of 5 (100%)",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 105 - len(info)
    assert len(forwarded) == 105 and forwarded[0] == ("dwd.request", 1_000, 100_000)


def test_quick_work_logs_its_start_and_end_only(caplog: pytest.LogCaptureFixture) -> None:
    step = logged(logging.getLogger("strata.test.progress"), "land", clock=_Clock())  # no callback: log only
    with caplog.at_level(logging.INFO, logger="strata.test.progress"):
        for done in range(1, 29):
            step("ods.request_log_raw", done, 28)
    assert [r.getMessage() for r in caplog.records] == [
        "land: ods.request_log_raw 1 of 28 (4%)",
        "land: ods.request_log_raw 28 of 28 (100%)",
    ]


def test_a_step_is_described_by_its_dates_and_options_never_by_a_string() -> None:
    assert _described("forget", {"user_id": "u_5ef403f3d0"}) == ("forget", "")
    assert _described(
        "score", {"day": dt.date(2026, 1, 5), "name": "user_risk", "shard": (1, 2), "batch_rows": 64}
    ) == ("score 2026-01-05 shard 1/2", "batch_rows=64")
    assert _described("land", {"paths": [Path(f"/l/{i}") for i in range(5)], "reland": True}) == (
        "land",
        "5 paths reland",
    )


def test_the_cli_leaves_the_process_logging_as_it_found_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from strata.cli import app

    strata = logging.getLogger("strata")
    before = strata.level, strata.propagate, list(strata.handlers)
    result = CliRunner().invoke(app, ["-vv", "config"], env={"STRATA_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert (strata.level, strata.propagate, list(strata.handlers)) == before  # an in-process run (a test) too
