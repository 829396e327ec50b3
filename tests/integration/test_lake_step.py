"""One lake handle per step: a DWD build takes each lock once and opens its ODS table once.
Real Delta tables, real file locks; the counts are taken where the work happens."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from synthetic_workload import generate
from warehouse.dwd.build import build_day
from warehouse.ods.ingest import ingest
from warehouse.settings import Settings, load_settings
from warehouse.storage import locks
from warehouse.storage.lake import Lake

DAY = dt.date(2026, 1, 5)


@pytest.fixture
def landed(tmp_path: Path, strata_env: Path) -> Settings:
    out = tmp_path / "landing"
    generate(out, days=1, requests_per_day=400, seed=3, start=DAY, fault_rate=0.02)
    settings = load_settings({"STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    ingest(settings, [out / "requests", out / "feedback"])
    return settings


def test_a_dwd_build_takes_each_partition_lock_once_and_opens_ods_once(
    landed: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    takes: Counter[str] = Counter()
    hold = locks.hold

    def counted(settings: Settings, *, write=(), read=()):  # type: ignore[no-untyped-def]
        write = list(write)
        takes.update(locks.Key.of(t, p).name for t, p in write if p)
        return hold(settings, write=write, read=read)

    opens: Counter[str] = Counter()
    init, refresh = DeltaTable.__init__, DeltaTable.update_incremental

    def opened(self: DeltaTable, uri: object, *args: object, **kwargs: object) -> None:
        opens[str(uri).rstrip("/").rsplit("/", 2)[-2:][-1]] += 1
        init(self, uri, *args, **kwargs)  # type: ignore[arg-type]

    def refreshed(self: DeltaTable) -> None:
        opens[self.table_uri.rstrip("/").rsplit("/", 1)[-1]] += 1
        refresh(self)

    monkeypatch.setattr(locks, "hold", counted)
    monkeypatch.setattr(DeltaTable, "__init__", opened)
    monkeypatch.setattr(DeltaTable, "update_incremental", refreshed)
    reports = build_day(Lake(landed), DAY)

    assert set(reports) == {"feedback", "requests"} and reports["requests"].published > 0
    request_partition = f"dwd.request#event_date={DAY}"
    assert takes[request_partition] == 1, takes
    assert all(n == 1 for n in takes.values()), takes
    assert opens["request_log_raw"] == 1, opens
    assert opens["feedback_raw"] == 1, opens
