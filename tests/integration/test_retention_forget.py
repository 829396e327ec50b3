"""Retention and the right to be forgotten: data removed for good, in every file."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import AZURE_SAMPLE, SHIPPED_AZURE_MAPPING
from fixtures_otlp import otlp_export_line
from lake_compare import assert_no_trace

from contracts.errors import InputError
from warehouse.dwd.build import build_day
from warehouse.dws.build import build as build_dws
from warehouse.ods.ingest import ingest
from warehouse.ops.forget import forget_user
from warehouse.ops.retention import apply_retention
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.sources.collector.encoding import JSON, accept
from warehouse.sources.collector.segments import convert_segment, frame
from warehouse.storage.lake import Lake
from warehouse.tables import table

DAY = dt.date(2026, 3, 1)


def _records(user: str, count: int, day: dt.date, prefix: str) -> list[dict]:
    return [
        {
            "request_id": f"{prefix}-{i}",
            "ts": f"{day.isoformat()}T0{i % 9}:00:00Z",
            "duration_ms": 10.0,
            "tenant_id": "t1",
            "user_id": user,
            "operation": "chat",
            "model": "m1",
            "model_version": "v1",
            "input_tokens": 3,
            "output_tokens": 4,
            "status_code": 200,
        }
        for i in range(count)
    ]


def _land(tmp_path: Path, name: str, lines: list[bytes], day: dt.date) -> Path:
    path = tmp_path / "landing" / f"date={day.isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _every_file_text(root: Path) -> str:
    """All bytes under the lake, Parquet files decoded (compressed pages would hide a match)."""
    chunks: list[str] = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            chunks.append(repr(table.to_pylist()))
        else:
            chunks.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)


def test_forget_removes_a_user_from_every_layer_and_file(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    victim, other = "user-to-forget-7731", "user-who-stays-1234"
    lines = [json.dumps(r).encode() for r in _records(victim, 6, DAY, "v") + _records(other, 4, DAY, "o")]
    lines.append(b'{"request_id": "v-broken", "user_id": "' + victim.encode() + b'", "ts": ')  # truncated
    spelled = victim.replace("-", "\\u002d")  # the same id, written with JSON escapes
    lines.append(json.dumps(_records("someone", 1, DAY, "v-escaped")[0]).replace("someone", spelled).encode())
    requests = _land(tmp_path, "requests.jsonl", lines, DAY)
    feedback = tmp_path / "landing" / "feedback" / f"date={DAY.isoformat()}" / "fb.jsonl"
    feedback.parent.mkdir(parents=True)
    feedback.write_text(
        json.dumps(
            {
                "request_id": "v-1",
                "ts": f"{DAY.isoformat()}T12:00:00Z",
                "kind": "flag",
                "value": "spam",
                "source": "trust",
            }
        )
        + "\n"
    )
    ingest(settings, [requests, feedback])
    build_day(Lake(settings), DAY)
    build_dws(Lake(settings), DAY)
    users = table("dws.user_features")
    victim_rows = (
        Lake(settings)
        .read_frame(users)
        .filter(pl.col("user_pseudonym") == pseudonym(settings.require_pseudonym_key(), victim))
        .height
    )
    lake_root = Path(settings.lake_uri)
    victim_key = pseudonym(settings.require_pseudonym_key(), victim)
    before = _every_file_text(lake_root)
    assert victim in before and victim_key in before

    report = forget_user(settings, victim)

    assert report.rows["ods.request_log_raw"] == 8
    assert report.rows["dwd.request"] == 7
    assert report.rows["dwd.quarantine"] == 1
    assert report.rows["dwd.feedback"] == 1
    assert victim_rows and report.rows["dws.user_features"] == victim_rows  # the DWS features go too
    after = _every_file_text(lake_root)
    assert victim not in after
    assert victim_key not in after
    assert other in after  # everyone else is still there
    remaining = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    assert remaining.height == 4


def test_retention_deletes_old_ods_partitions_and_their_files(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    old_day, new_day = dt.date(2026, 1, 1), dt.date(2026, 3, 1)
    old = _land(tmp_path, "old.jsonl", [json.dumps(r).encode() for r in _records("u", 3, old_day, "a")], old_day)
    new = _land(tmp_path, "new.jsonl", [json.dumps(r).encode() for r in _records("u", 2, new_day, "b")], new_day)
    broken = _land(tmp_path, "broken.jsonl", [b'{"request_id": "old-broken", "user_id": "u", "ts": '], old_day)
    ingest(settings, [old, new, broken])
    build_day(Lake(settings), old_day)
    build_day(Lake(settings), new_day)
    assert Lake(settings).read_frame(table("dwd.quarantine")).height == 1
    deleted = apply_retention(settings, days=30, today=dt.date(2026, 3, 10))
    assert deleted["ods.request_log_raw"] == 4
    assert deleted["dwd.quarantine"] == 1  # quarantined raw lines age out with the raw data
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert ods.get_column("event_date").unique().to_list() == [new_day]
    leftover = list((Path(settings.lake_uri) / "ods" / "request_log_raw").rglob("*.parquet"))
    assert all("2026-01-01" not in str(p) for p in leftover)


def test_files_whose_lines_retention_removed_are_not_landed_again(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    old_day = dt.date(2026, 1, 1)
    old = _land(tmp_path, "old.jsonl", [json.dumps(r).encode() for r in _records("u", 3, old_day, "a")], old_day)
    ingest(settings, [old])
    apply_retention(settings, days=30, today=dt.date(2026, 3, 10))
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 0

    again = ingest(settings, [old])  # e.g. the scheduler ingesting the landing folder once more

    assert not again.landed and again.skipped[0].landed_as == "jsonl"
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 0
    ledger = Lake(settings).read_frame(table("ops.landed_files"))
    assert ledger.select("table_name", "lines", "source").rows() == [("ods.request_log_raw", 3, "jsonl")]


def test_a_file_with_a_forgotten_user_is_never_landed_again(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    victim = "user-to-forget-7731"
    mixed = _land(
        tmp_path,
        "mixed.jsonl",
        [json.dumps(r).encode() for r in _records(victim, 2, DAY, "v") + _records("stays", 2, DAY, "o")],
        DAY,
    )
    only = _land(tmp_path, "only.jsonl", [json.dumps(r).encode() for r in _records(victim, 2, DAY, "w")], DAY)
    ingest(settings, [mixed, only])
    forget_user(settings, victim)
    version = Lake(settings).version(table("ods.request_log_raw"))

    assert not ingest(settings, [mixed, only]).landed  # skipped, though `only` has no line left in ODS
    with pytest.raises(InputError, match="2 of its 4 lines were removed from ODS"):
        ingest(settings, [mixed], reland=True)
    assert Lake(settings).version(table("ods.request_log_raw")) == version
    assert victim not in repr(Lake(settings).read(table("ods.request_log_raw")).to_pylist())


def test_a_file_in_ods_but_not_in_the_ledger_is_still_skipped(tmp_path: Path, strata_env: Path) -> None:
    # As after a crash between the ODS commit and the ledger's, or in a lake older than the ledger.
    settings = load_settings()
    path = _land(tmp_path, "a.jsonl", [json.dumps(r).encode() for r in _records("u", 3, DAY, "a")], DAY)
    ingest(settings, [path])
    shutil.rmtree(Path(table("ops.landed_files").uri(settings)))
    assert not ingest(settings, [path]).landed
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 3


def test_forget_removes_lines_a_mapping_gives_the_user_as_a_constant(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    sample, shipped = AZURE_SAMPLE, SHIPPED_AZURE_MAPPING
    mapping = tmp_path / "one_user.yaml"  # a trace of one known user: no user column, a constant
    mapping.write_text(shipped.read_text().replace("constants:\n", "constants:\n  user_id: trace-owner-42\n"))
    landed = ingest(settings, [sample], mapping_file=mapping).landed[0]

    report = forget_user(settings, "trace-owner-42")

    assert report.rows["ods.request_log_raw"] == landed.lines
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 0


def test_forget_rewrites_the_landing_zone_and_the_ledger_still_skips_the_files(strata_env: Path) -> None:
    import gzip

    settings = load_settings()
    victim = "user-to-forget-7731"
    zone = settings.landing_dir / f"date={DAY.isoformat()}"
    zone.mkdir(parents=True)
    mixed = zone / "mixed.jsonl.gz"
    kept_lines = [json.dumps(r).encode() for r in _records("stays", 2, DAY, "o")]
    theirs = [json.dumps(r).encode() for r in _records(victim, 2, DAY, "v")]
    mixed.write_bytes(gzip.compress(b"".join(line + b"\n" for line in theirs + kept_lines)))
    only = _land(
        settings.landing_dir.parent, "only.jsonl", [json.dumps(r).encode() for r in _records(victim, 2, DAY, "w")], DAY
    )
    assert only.is_relative_to(settings.landing_dir)
    ingest(settings, [settings.landing_dir])

    report = forget_user(settings, victim)

    assert report.files == 2 and not only.exists()  # a file with only the user's lines is gone
    assert gzip.decompress(mixed.read_bytes()) == b"".join(line + b"\n" for line in kept_lines)
    assert_no_trace(settings.home, victim)
    version = Lake(settings).version(table("ods.request_log_raw"))
    assert not ingest(settings, [settings.landing_dir]).landed  # the rewritten file is in the ledger
    assert Lake(settings).version(table("ods.request_log_raw")) == version


def test_forget_counts_what_no_ingest_has_landed_and_a_forget_after_the_ingest_finds_it(strata_env: Path) -> None:
    """Lines not yet landed have no ODS row to find them by: forget says how many files and spool
    segments wait (not a price list or a non-OTLP .json beside them), and the ingest that lands
    them leaves the user's lines out (the suppression list), so a forget after it finds none."""
    from typer.testing import CliRunner

    from strata.cli import app
    from warehouse.ops.landing import Unlanded

    settings = load_settings()
    victim = "user-to-forget-5120"
    zone = settings.landing_dir / f"date={DAY.isoformat()}"
    zone.mkdir(parents=True)
    (zone / "landed.jsonl").write_bytes(json.dumps(_records(victim, 1, DAY, "a")[0]).encode() + b"\n")
    ingest(settings, [settings.landing_dir])
    later = [json.dumps(r).encode() for r in _records(victim, 2, DAY, "b") + _records("stays", 1, DAY, "c")]
    waiting = _land(settings.landing_dir.parent, "later.jsonl", later, DAY)
    (zone / "manifest.json").write_text('{"files": 2}')
    export = [{**r, "ts": dt.datetime.fromisoformat(r["ts"])} for r in _records("someone", 1, DAY, "x")]
    (zone / "export.json").write_bytes(otlp_export_line(export) + b"\n")
    segment = settings.home / "collect" / "spool" / f"date={DAY.isoformat()}" / "collect-h-1-ab-000001.otlp.spool"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(frame(b"a record"))
    (segment.parent / "collect-h-1-ab-000002.otlp.spool").touch()  # opened, nothing in it yet

    result = CliRunner().invoke(app, ["forget", "--user", victim])  # rich: 80 columns off a terminal

    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "not yet ingested: 2 landing file(s), 1 spool segment(s) of `strata collect`;" in said
    assert max(map(len, result.output.splitlines())) <= 80
    assert waiting.read_bytes() == b"".join(line + b"\n" for line in later)  # no row named them yet
    assert ingest(settings, [settings.landing_dir]).suppressed == 2  # the suppression list keeps them out
    assert waiting.read_bytes() == later[-1] + b"\n"
    report = forget_user(settings, victim)
    assert report.unlanded == Unlanded(files=0, segments=1) and report.files == 0
    assert_no_trace(settings.home / "lake", victim)


def test_forget_redacts_the_user_in_audit_messages(tmp_path: Path, strata_env: Path) -> None:
    from warehouse.storage import audit

    settings = load_settings()
    victim = "user-to-forget-7731"
    key = pseudonym(settings.require_pseudonym_key(), victim)
    ingest(settings, [_land(tmp_path, "a.jsonl", [json.dumps(r).encode() for r in _records(victim, 1, DAY, "v")], DAY)])
    now = dt.datetime.now(dt.UTC)
    audit.record(
        Lake(settings),
        attempt_id="a1",
        table_name="dws.user_features",
        partition=f"event_date={DAY}",
        delta_version=None,
        status="failed",
        rows_in=1,
        rows_published=0,
        rows_rejected=1,
        rules_failed=["user_pseudonym.pattern"],
        started_at=now,
        duration_ms=1.0,
        message=f"user_pseudonym.pattern: 1 row(s) (e.g. {key!r}, {victim!r})",
    )  # as a failed audit says

    report = forget_user(settings, victim)

    assert report.redacted == {"ops.audit_log": 1}
    messages = Lake(settings).read_frame(table("ops.audit_log")).get_column("message").to_list()
    assert "user_pseudonym.pattern: 1 row(s) (e.g. '[forgotten]', '[forgotten]')" in messages
    assert_no_trace(settings.home, key)
    assert_no_trace(settings.home, victim)


def test_retention_takes_the_expired_lines_out_of_the_landing_zone(strata_env: Path) -> None:
    settings = load_settings()
    old_day, new_day = dt.date(2026, 1, 1), dt.date(2026, 3, 1)
    old = _land(
        settings.landing_dir.parent,
        "old.jsonl",
        [json.dumps(r).encode() for r in _records("u", 3, old_day, "a")],
        old_day,
    )
    recent = [json.dumps(r).encode() for r in _records("u", 2, new_day, "b")]
    both = _land(
        settings.landing_dir.parent,
        "both.jsonl",
        [json.dumps(r).encode() for r in _records("u", 1, old_day, "c")] + recent,
        new_day,
    )
    ingest(settings, [settings.landing_dir])

    apply_retention(settings, days=30, today=dt.date(2026, 3, 10))

    assert not old.exists()  # every line expired: the file is gone
    assert both.read_bytes() == b"".join(line + b"\n" for line in recent)  # only the expired line left it
    assert not ingest(settings, [settings.landing_dir]).landed  # the rewritten file is still skipped
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 2


def _converted_but_not_deleted(landing: Path, day: dt.date, lines: list[bytes]) -> tuple[Path, Path]:
    """A ``strata collect`` segment of these OTLP lines, and its converted file, landed by naming it: both left
    as by an ingest killed between converting the segment and deleting it, the converted file then ingested."""
    segment = landing / "otlp" / f"date={day.isoformat()}" / "collect-h-1-abcd0123-000001.otlp.spool"
    segment.parent.mkdir(parents=True)
    data = b"".join(frame(accept(line, JSON, None).record or b"") for line in lines)
    segment.write_bytes(data)
    converted = convert_segment(segment)
    segment.write_bytes(data)
    return segment, converted


@pytest.mark.parametrize("removal", ["forget", "retention"])
def test_forget_and_retention_convert_pending_segments_first_so_none_brings_a_line_back(
    removal: str, strata_env: Path
) -> None:
    settings = load_settings()
    victim, old_day = "user-to-forget-7731", dt.date(2026, 1, 1)
    records = _records(victim, 2, old_day, "v") + _records("stays", 2, DAY, "o")
    lines = [otlp_export_line([{**r, "ts": dt.datetime.fromisoformat(r["ts"])}]) for r in records]
    segment, converted = _converted_but_not_deleted(settings.landing_dir, DAY, lines)
    assert [f.path for f in ingest(settings, [converted]).landed] == [converted] and segment.exists()

    if removal == "forget":
        assert forget_user(settings, victim).files == 1
    else:
        apply_retention(settings, days=30, today=DAY)  # the victim's spans are the old day's

    assert not segment.exists()  # the converted file won, and lost those lines
    assert converted.read_bytes() == b"".join(line + b"\n" for line in lines[2:])
    assert_no_trace(settings.home, victim)
    assert not ingest(settings, [settings.landing_dir]).landed  # nothing converted or landed again
    assert Lake(settings).read(table("ods.request_log_raw")).num_rows == 2
