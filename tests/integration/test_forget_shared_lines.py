"""Forget takes one user out of export lines shared with others, and a suppression list keeps them out.

One OTLP export line carries the spans of many users: ``strata forget`` must remove the forgotten
user's spans and leave every other span the same JSON text (ODS, the landing file, DWD and a
rebuild of it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import polars as pl
from fixtures_otlp import otlp_export_line
from lake_compare import assert_no_trace
from typer.testing import CliRunner

from strata.cli import app
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.storage import lake
from warehouse.tables import DWD_REQUEST, ODS_REQUESTS, OPS_BOOKS, OPS_LANDED_FILES

DAY = dt.date(2026, 3, 1)
A, B = "user-forgotten-4417", "user-who-stays-9021"


def _records(user: str, prefix: str, hours: range, day: dt.date = DAY) -> list[dict]:
    return [
        {
            "request_id": f"{prefix}-{h}",
            "ts": dt.datetime(day.year, day.month, day.day, h, 0, 0, 123000, tzinfo=dt.UTC),
            "duration_ms": 12.5,
            "tenant_id": "t1",
            "user_id": user,
            "operation": "chat",
            "model": "m1",
            "input_tokens": 3,
            "output_tokens": 4,
            "status_code": 200,
        }
        for h in hours
    ]


def _interleaved(a: list[dict], b: list[dict]) -> list[dict]:
    return [r for pair in zip(a, b, strict=True) for r in pair]


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _dwd(settings) -> pl.DataFrame:  # noqa: ANN001
    return lake.read_frame(settings, DWD_REQUEST).drop("built_at", strict=False).sort("request_id")


def test_forget_rewrites_a_shared_export_line_and_keeps_the_others_spans_byte_for_byte(strata_env: Path) -> None:
    settings = load_settings()
    a, b = _records(A, "a", range(1, 6)), _records(B, "b", range(1, 6))
    export = settings.landing_dir / f"date={DAY}" / "export.json"
    export.parent.mkdir(parents=True)
    export.write_bytes(otlp_export_line(_interleaved(a, b)) + b"\n")
    _cli("ingest", str(settings.landing_dir))
    _cli("build", "dwd", "--date", str(DAY))
    before = _dwd(settings)
    assert before.height == 10
    key = settings.require_pseudonym_key()

    _cli("forget", "--user", A)

    only_b = otlp_export_line(b)  # the same JSON text the exporter wrote for B's spans, in the same order
    ods = lake.read_frame(settings, ODS_REQUESTS)
    assert ods.get_column("raw_line").to_list() == [only_b]
    assert ods.get_column("line_no").to_list() == [1]
    assert export.read_bytes() == only_b + b"\n"
    ledger = lake.read_frame(settings, OPS_LANDED_FILES)
    assert hashlib.sha256(only_b + b"\n").hexdigest() in ledger.get_column("file_sha256").to_list()
    kept = before.filter(pl.col("user_pseudonym") == pseudonym(key, B))
    assert kept.height == 5
    assert _dwd(settings).equals(kept)
    assert_no_trace(settings.home, A)
    assert_no_trace(settings.home, pseudonym(key, A))

    _cli("build", "dwd", "--date", str(DAY))  # a rebuild from ODS gives the same DWD

    assert _dwd(settings).equals(kept)
    books = lake.read_frame(settings, OPS_BOOKS).filter(pl.col("event_date") == DAY)
    assert books.get_column("balanced").all()
    version = lake.version(settings, ODS_REQUESTS)
    _cli("ingest", str(settings.landing_dir))  # the rewritten file is in the ledger: not landed again
    assert lake.version(settings, ODS_REQUESTS) == version
