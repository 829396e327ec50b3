"""Forget takes one user out of export lines shared with others, and a suppression list keeps them out.

One OTLP export line carries the spans of many users: ``strata forget`` must remove the forgotten
user's spans and leave every other span the same JSON text (ODS, the landing file, DWD and a
rebuild of it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
from pathlib import Path

import polars as pl
from collect_server import receiver_thread
from fixtures_otlp import otlp_export_line
from lake_compare import assert_no_trace
from typer.testing import CliRunner

from strata.cli import app
from warehouse.privacy import pseudonym
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
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


def _dwd(settings: Settings) -> pl.DataFrame:
    return Lake(settings).read_frame(DWD_REQUEST).drop("built_at", strict=False).sort("request_id")


def _with_an_http_span_of(user: str, line: bytes) -> bytes:
    """The export with one more span, no GenAI call (an HTTP client span), of ``user``."""
    doc = json.loads(line)
    http_span = {
        "spanId": "00f067aa0ba902b7",
        "name": "POST /v1/chat/completions",
        "startTimeUnixNano": "1772330400000000000",
        "attributes": [
            {"key": "user.id", "value": {"stringValue": user}},
            {"key": "http.method", "value": {"stringValue": "POST"}},
        ],
    }
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].insert(3, http_span)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def test_forget_rewrites_a_shared_export_line_and_keeps_the_others_spans_byte_for_byte(strata_env: Path) -> None:
    settings = load_settings()
    a, b = _records(A, "a", range(1, 6)), _records(B, "b", range(1, 6))
    export = settings.landing_dir / f"date={DAY}" / "export.json"
    export.parent.mkdir(parents=True)
    export.write_bytes(_with_an_http_span_of(A, otlp_export_line(_interleaved(a, b))) + b"\n")
    _cli("ingest", str(settings.landing_dir))
    _cli("build", "dwd", "--date", str(DAY))
    before = _dwd(settings)
    assert before.height == 10
    key = settings.require_pseudonym_key()

    _cli("forget", "--user", A)

    only_b = otlp_export_line(b)  # the same JSON text the exporter wrote for B's spans, in the same order
    # (A's HTTP span, no GenAI call, is gone too)
    ods = Lake(settings).read_frame(ODS_REQUESTS)
    assert ods.get_column("raw_line").to_list() == [only_b]
    assert ods.get_column("line_no").to_list() == [1]
    assert export.read_bytes() == only_b + b"\n"
    ledger = Lake(settings).read_frame(OPS_LANDED_FILES)
    assert hashlib.sha256(only_b + b"\n").hexdigest() in ledger.get_column("file_sha256").to_list()
    kept = before.filter(pl.col("user_pseudonym") == pseudonym(key, B))
    assert kept.height == 5
    assert _dwd(settings).equals(kept)
    assert_no_trace(settings.home, A)
    assert_no_trace(settings.home, pseudonym(key, A))

    _cli("build", "dwd", "--date", str(DAY))  # a rebuild from ODS gives the same DWD

    assert _dwd(settings).equals(kept)
    books = Lake(settings).read_frame(OPS_BOOKS).filter(pl.col("event_date") == DAY)
    assert books.get_column("balanced").all()
    version = Lake(settings).version(ODS_REQUESTS)
    _cli("ingest", str(settings.landing_dir))  # the rewritten file is in the ledger: not landed again
    assert Lake(settings).version(ODS_REQUESTS) == version


def _post(url: str, body: bytes) -> int:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def _jsonl(record: dict) -> bytes:
    return json.dumps({**record, "ts": record["ts"].isoformat()}).encode()


def test_a_forgotten_user_never_comes_back_from_a_resent_export_a_late_file_or_an_open_segment(
    strata_env: Path,
) -> None:
    settings = load_settings()
    a, b = _records(A, "aold", range(1, 6)), _records(B, "b", range(1, 6))
    export = otlp_export_line(_interleaved(a, b))
    first = settings.landing_dir / f"date={DAY}" / "export.json"
    first.parent.mkdir(parents=True)
    first.write_bytes(export + b"\n")
    _cli("ingest", str(settings.landing_dir))
    with receiver_thread(STRATA_COLLECT_SEGMENT_SECONDS="3600") as url:
        assert _post(url, export) == 200  # in a segment still open during the forget
        _cli("forget", "--user", A)
        assert _post(url, export) == 200  # the same export sent again
    back = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    late = [_records(A, "aold-late", range(7, 8))[0], _records(B, "b-late", range(7, 8))[0]]
    late.append({**_records(A, "a-back", range(1, 2))[0], "ts": back})  # the user came back after the forget
    late_file = settings.landing_dir / f"date={DAY}" / "late.jsonl"
    late_file.write_bytes(b"".join(_jsonl(r) + b"\n" for r in late))

    said = " ".join(_cli("ingest", str(settings.landing_dir)).split())

    assert "11 record(s) of forgotten users suppressed" in said  # 5 + 5 spans re-sent, 1 late line
    ods = Lake(settings).read_frame(ODS_REQUESTS)
    lines = b"\n".join(ods.get_column("raw_line").to_list())
    assert lines.count(b'"b-') == 5 * 3 + 1  # B's spans in the first, the open and the re-sent export, B's late line
    assert b"aold" not in lines and lines.count(A.encode()) == 1  # A only where they came back
    only_b = otlp_export_line(b)
    assert ods.get_column("raw_line").to_list().count(only_b) == 3  # B's spans as sent, byte for byte
    assert_no_trace(settings.home, "aold")  # in no landing file, no segment, no table
    _cli("build", "dwd", "--date", str(DAY))
    _cli("build", "dwd", "--date", str(back.date()))
    dwd = _dwd(settings)
    key = settings.require_pseudonym_key()
    assert sorted(dwd.filter(pl.col("user_pseudonym") == pseudonym(key, B)).get_column("request_id")) == [
        *(f"b-{h}" for h in range(1, 6)),
        "b-late-7",
    ]
    assert dwd.filter(pl.col("user_pseudonym") == pseudonym(key, A)).get_column("request_id").to_list() == ["a-back-1"]
    books = Lake(settings).read_frame(OPS_BOOKS).filter(pl.col("event_date") == DAY)
    assert books.get_column("suppressed").to_list() == [11]


def test_a_second_forget_finds_the_landing_file_the_first_one_rewrote(strata_env: Path) -> None:
    """After a forget (or an ingest that left a forgotten user out) the landing file is no longer the one
    its ODS rows name by hash: the next forget of another user in it must still take their spans out."""
    settings = load_settings()
    c = "user-third-5150"
    a, b, rest = _records(A, "a", range(1, 4)), _records(B, "b", range(1, 4)), _records(c, "c", range(1, 4))
    export = settings.landing_dir / f"date={DAY}" / "export.json"
    export.parent.mkdir(parents=True)
    only_a = otlp_export_line(_records(A, "a-alone", range(5, 6)))
    export.write_bytes(only_a + b"\n" + otlp_export_line([*a, *b, *rest]) + b"\n")
    _cli("ingest", str(settings.landing_dir))

    _cli("forget", "--user", A)  # drops the first line, rewrites the second
    _cli("forget", "--user", B)

    assert export.read_bytes() == otlp_export_line(rest) + b"\n"
    assert Lake(settings).read_frame(ODS_REQUESTS).get_column("raw_line").to_list() == [otlp_export_line(rest)]
    assert_no_trace(settings.home, B)
