"""ODS and DWD against the generator's ground truth: every line accounted for."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import AZURE_FULL, AZURE_SAMPLE, SHIPPED_AZURE_MAPPING

from contracts.errors import InputError
from synthetic_workload import generate
from warehouse.dwd.build import build, build_day
from warehouse.dwd.prices import load_prices
from warehouse.ods.ingest import ingest
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import table

START = dt.date(2026, 1, 5)
DAYS = [START, START + dt.timedelta(days=1)]
#: Which quarantine rules each generator fault kind must produce.
FAULT_RULES = {
    "truncated_json": {"line.invalid_json"},
    "invalid_utf8": {"line.invalid_utf8"},
    "oversized_line": {"line.oversized"},
    "negative_duration": {"duration_ms.min"},
    "far_future_ts": {"ts.future"},
    "wrong_type": {
        "input_tokens.type",
        "duration_ms.type",
        "status_code.type",
        "output_tokens.type",
        "ts.type",
        "attempt.type",
        "cache_hit.type",
    },
    "missing_required": {"request_id.required", "ts.required", "tenant_id.required", "model.required"},
}


def table_frame(settings: Settings, name: str, drop: tuple[str, ...] = ()) -> pl.DataFrame:
    frame = pl.from_arrow(Lake(settings).read(table(name)))
    assert isinstance(frame, pl.DataFrame)
    return frame.drop(list(drop), strict=False)


def assert_same_rows(mine: pl.DataFrame, theirs: pl.DataFrame, label: str) -> None:
    """Equal as multisets of rows, whatever the order (anti-joins both ways, same heights)."""
    assert mine.height == theirs.height, label
    for left, right in ((mine, theirs), (theirs, mine)):
        extra = left.join(right, on=left.columns, how="anti", nulls_equal=True)
        if not extra.is_empty():
            twin = right.filter(pl.col(left.columns[0]).is_in(extra.get_column(left.columns[0]).implode()))
            differ = {
                c: (extra.row(0, named=True)[c], twin.row(0, named=True)[c])
                for c in left.columns
                if twin.height and extra.row(0, named=True)[c] != twin.row(0, named=True)[c]
            }
            raise AssertionError(f"{label}: {extra.height} row(s) differ, e.g. {differ}")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("landing")
    manifest = generate(out, days=2, requests_per_day=6000, seed=5, start=START, fault_rate=0.02)
    return out, manifest


@pytest.fixture(scope="module")
def built(generated: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The generated days ingested and built once, shared by the read-only tests."""
    out, _ = generated
    home = tmp_path_factory.mktemp("home")
    settings = load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    ingest(settings, [out / "requests", out / "feedback"])
    load_prices(settings, out / "prices.csv")
    for day in DAYS:
        build_day(Lake(settings), day)
    return settings


def test_dwd_counts_equal_the_manifest(built: Settings, generated: tuple[Path, dict]) -> None:
    _, manifest = generated
    books = pl.from_arrow(Lake(built).read(table("ops.books"))).filter(pl.col("table_name") == "dwd.request")
    quarantine = pl.from_arrow(Lake(built).read(table("dwd.quarantine"))).filter(
        pl.col("target_table") == "dwd.request"
    )
    request = pl.from_arrow(Lake(built).read(table("dwd.request")))
    for day in DAYS:
        truth = manifest["days"][day.isoformat()]
        row = books.filter(pl.col("event_date") == day).row(0, named=True)
        assert row["balanced"] is True
        assert row["ods_rows"] == truth["lines"]
        assert row["dwd_rows"] == truth["requests"] == request.filter(pl.col("event_date") == day).height
        assert row["duplicates"] == truth["duplicates"]
        assert row["malformed"] == sum(truth["faults"][k] for k in ("truncated_json", "invalid_utf8", "oversized_line"))
        assert row["quarantined"] == sum(
            truth["faults"][k] for k in ("negative_duration", "far_future_ts", "wrong_type", "missing_required")
        )
        held = quarantine.filter(pl.col("event_date") == day)
        for kind, rules in FAULT_RULES.items():
            hit = held.filter(pl.col("rules").list.eval(pl.element().is_in(list(rules))).list.any())
            assert hit.height == truth["faults"][kind], kind
            ids = set(truth["fault_request_ids"][kind])
            found = set(hit.get_column("request_id").drop_nulls().to_list())
            assert found <= ids, kind
            if kind not in ("missing_required", "truncated_json", "invalid_utf8"):
                assert found == ids, kind


def test_dwd_token_and_error_sums_per_model_equal_the_manifest(built: Settings, generated: tuple[Path, dict]) -> None:
    _, manifest = generated
    request = pl.from_arrow(Lake(built).read(table("dwd.request")))
    for day in DAYS:
        sums = (
            request.filter(pl.col("event_date") == day)
            .group_by("model")
            .agg(
                pl.len().alias("requests"),
                pl.col("input_tokens").sum(),
                pl.col("output_tokens").sum(),
                pl.col("cached_input_tokens").sum(),
                (pl.col("status_code") >= 400).sum().alias("errors"),
            )
        )
        got = {r["model"]: r for r in sums.iter_rows(named=True)}
        for model, truth in manifest["days"][day.isoformat()]["models"].items():
            for key in ("requests", "input_tokens", "output_tokens", "cached_input_tokens", "errors"):
                assert got[model][key] == truth[key], (day, model, key)


def test_dwd_is_clean_pseudonymized_and_priced(built: Settings, generated: tuple[Path, dict]) -> None:
    out, _ = generated
    request = pl.from_arrow(Lake(built).read(table("dwd.request")))
    assert request.get_column("request_id").is_unique().all()
    assert request.get_column("ts").dt.date().eq(request.get_column("event_date")).all()
    raw_users = {
        json.loads(line)["user_id"] for line in _lines(out, DAYS[0]) if b'"user_id"' in line and _is_json(line)
    }
    assert not raw_users & set(request.get_column("user_pseudonym").drop_nulls().to_list())
    assert request.get_column("user_pseudonym").drop_nulls().str.len_chars().eq(32).all()
    priced = request.filter(pl.col("model").is_not_null())  # a tool's or an agent's call names no model, no price
    assert priced.get_column("cost_usd").null_count() == 0 and request.height > priced.height
    assert (priced.get_column("cost_usd") >= 0).all()
    assert request.filter(pl.col("retry_of").is_not_null()).get_column("is_retry").all()
    labelled = request.filter(pl.col("feedback_kind") == "review")
    assert labelled.height > 0


def _lines(out: Path, day: dt.date) -> list[bytes]:
    import gzip

    lines: list[bytes] = []
    for path in sorted((out / "requests" / f"date={day.isoformat()}").rglob("*.jsonl.gz")):
        lines += gzip.decompress(path.read_bytes()).splitlines()
    return lines


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def test_ods_keeps_every_line_byte_exact(built: Settings, generated: tuple[Path, dict]) -> None:
    out, manifest = generated
    ods = pl.from_arrow(Lake(built).read(table("ods.request_log_raw")))
    assert ods.height == sum(d["lines"] for d in manifest["days"].values())
    some_file = next((out / "requests").rglob("*.jsonl.gz"))
    import gzip

    landed = ods.filter(pl.col("source_file") == str(some_file)).sort("line_no")
    assert landed.get_column("raw_line").to_list() == gzip.decompress(some_file.read_bytes()).splitlines()
    assert ods.filter(pl.col("is_malformed")).get_column("parse_error").null_count() == 0


def test_every_table_written_has_a_contract(built: Settings) -> None:
    from contracts import all_contracts

    written = {f"{p.parent.name}.{p.name}" for p in Path(built.lake_uri).glob("*/*") if (p / "_delta_log").is_dir()}
    assert {"ods.request_log_raw", "dwd.request", "dwd.quarantine", "ops.audit_log", "ops.books"} <= written
    assert written <= set(all_contracts())


def test_reingest_and_rebuild_change_nothing(built: Settings, generated: tuple[Path, dict]) -> None:
    out, _ = generated
    tables = ["ods.request_log_raw", "ods.feedback_raw", "dwd.request", "dwd.feedback", "dwd.quarantine", "ops.books"]
    before = {t: table_frame(built, t) for t in tables}
    versions = {t: Lake(built).version(table(t)) for t in tables[:2]}
    report = ingest(built, [out / "requests", out / "feedback"])
    assert not report.landed and report.skipped
    assert {t: Lake(built).version(table(t)) for t in tables[:2]} == versions  # ODS untouched: no new version
    build_day(Lake(built), DAYS[0])
    for name in tables:
        assert_same_rows(table_frame(built, name), before[name], name)


def test_late_events_and_late_feedback_are_picked_up_by_a_rerun(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    day = dt.date(2026, 2, 1)
    landing = tmp_path / "landing"
    first = _write(landing / "requests" / "a.jsonl", [_record("r1", day, user="alice"), _record("r2", day)])
    ingest(settings, [first])
    report = build(Lake(settings), "requests", day)
    assert report.books.dwd_rows == 2 and report.counts.incomplete == 2  # no price list was loaded
    late = _write(landing / "requests" / "late.jsonl", [_record("r3", day, hour=23)])
    ingest(settings, [late])
    assert build(Lake(settings), "requests", day).books.dwd_rows == 3
    later = day + dt.timedelta(days=3)
    fb = _write(
        landing / "feedback" / "fb.jsonl",
        [
            {
                "request_id": "r1",
                "ts": f"{later.isoformat()}T10:00:00Z",
                "kind": "review",
                "value": "abusive",
                "source": "trust",
            }
        ],
    )
    ingest(settings, [fb])
    build_day(Lake(settings), later)  # builds that day's feedback and merges it into earlier requests
    labels = pl.from_arrow(Lake(settings).read(table("dwd.request"))).sort("request_id")
    assert labels.get_column("feedback_value").to_list() == ["abusive", None, None]
    build(Lake(settings), "requests", day)  # a rebuild of the request day keeps the label
    assert pl.from_arrow(Lake(settings).read(table("dwd.request"))).sort("request_id").get_column(
        "feedback_value"
    ).to_list() == ["abusive", None, None]


def _record(request_id: str, day: dt.date, *, hour: int = 12, user: str = "bob") -> dict:
    return {
        "request_id": request_id,
        "ts": f"{day.isoformat()}T{hour:02d}:00:00.000+00:00",
        "duration_ms": 120.5,
        "tenant_id": "t1",
        "user_id": user,
        "operation": "chat",
        "model": "m1",
        "input_tokens": 10,
        "output_tokens": 5,
        "status_code": 200,
    }


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_sigkill_during_a_dwd_build_then_rerun_equals_a_clean_build(
    tmp_path: Path, generated: tuple[Path, dict]
) -> None:
    out, _ = generated
    env = {"STRATA_HOME": str(tmp_path / "home"), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"}
    settings = load_settings(env)
    ingest(settings, [out / "requests" / f"date={DAYS[0].isoformat()}"])
    script = (
        "import datetime as dt, sys, time\n"
        "import warehouse.dwd.build as dwd, warehouse.dwd.transform as transform, warehouse.ods.scan as scan\n"
        "from warehouse.settings import load_settings\n"
        "from warehouse.storage.lake import Lake\n"
        "real = transform.parse_rows\n"
        "def slow(*a, **k):\n"
        "    print('started', flush=True); time.sleep(0.5); return real(*a, **k)\n"
        "transform.parse_rows = slow\n"
        "scan.BATCH_ROWS = 1000\n"
        f"dwd.build(Lake(load_settings()), 'requests', dt.date.fromisoformat('{DAYS[0].isoformat()}'))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for _ in range(3):
        assert proc.stdout.readline().strip() == "started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert Lake(settings).open_table(table("dwd.request")) is None  # nothing became visible
    build(Lake(settings), "requests", DAYS[0])
    clean = load_settings({**env, "STRATA_HOME": str(tmp_path / "clean")})
    ingest(clean, [out / "requests" / f"date={DAYS[0].isoformat()}"])
    build(Lake(clean), "requests", DAYS[0])
    for name in ("dwd.request", "dwd.quarantine", "ops.books"):
        lineage = ("batch_id", "quarantined_at")  # when and in which run a line arrived
        assert_same_rows(table_frame(settings, name, lineage), table_frame(clean, name, lineage), name)


def test_azure_trace_ingests_through_its_mapping(strata_env: Path) -> None:
    source = AZURE_FULL if AZURE_FULL.is_file() else AZURE_SAMPLE
    with source.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    days = Counter(r["TIMESTAMP"][:10] for r in rows)
    settings = load_settings()
    report = ingest(settings, [source], mapping_file=Path("azure_llm_2023_conv"))
    assert report.landed[0].lines == len(rows) + 1  # the header line is archived too
    books = [build(Lake(settings), "requests", dt.date.fromisoformat(day)).books for day in sorted(days)]
    # Every line is in some day's books, the header line too (it takes its neighbours' date).
    assert sum(b.ods_rows for b in books) == len(rows) + 1 and sum(b.malformed for b in books) == 1
    request = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    assert request.height == len(rows)
    assert request.get_column("input_tokens").sum() == sum(int(r["ContextTokens"]) for r in rows)
    assert request.get_column("output_tokens").sum() == sum(int(r["GeneratedTokens"]) for r in rows)
    first = min(rows, key=lambda r: r["TIMESTAMP"])["TIMESTAMP"]
    assert request.get_column("ts").min() == dt.datetime.strptime(first[:26], "%Y-%m-%d %H:%M:%S.%f").replace(
        tzinfo=dt.UTC
    )


def test_a_day_of_only_bad_lines_publishes_its_quarantine_and_books(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    day = dt.date(2026, 2, 3)
    bad = tmp_path / f"date={day.isoformat()}" / "garbage.jsonl"  # a producer wrote nothing usable that day
    bad.parent.mkdir()
    bad.write_bytes(b'{"broken\nnot json\n' + json.dumps({**_record("r1", day), "model": None}).encode() + b"\n")
    ingest(settings, [bad])
    report = build(Lake(settings), "requests", day)
    assert report.books.balanced
    assert (report.books.dwd_rows, report.books.malformed, report.books.quarantined) == (0, 2, 1)
    assert report.rules == {"line.invalid_json": 2, "model.required": 1}
    assert Lake(settings).read(table("dwd.request")).num_rows == 0
    assert Lake(settings).read(table("dwd.quarantine")).num_rows == 3


def test_a_csv_file_without_a_mapping_is_refused_before_anything_lands(strata_env: Path) -> None:
    settings = load_settings()
    with pytest.raises(InputError, match="give a mapping file or the name of a shipped one"):
        ingest(settings, [AZURE_SAMPLE])
    assert Lake(settings).open_table(table("ods.request_log_raw")) is None


def test_a_file_landed_with_a_wrong_mapping_is_landed_again_with_reland(tmp_path: Path, strata_env: Path) -> None:
    with AZURE_SAMPLE.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    shipped = SHIPPED_AZURE_MAPPING
    wrong = tmp_path / "azure_swapped.yaml"  # a mapping bug: the token columns swapped
    wrong.write_text(
        shipped.read_text()
        .replace("input_tokens: ContextTokens", "input_tokens: GeneratedTokens")
        .replace("output_tokens: GeneratedTokens", "output_tokens: ContextTokens")
    )
    settings = load_settings()

    def build_and_sum(days: set[dt.date]) -> int:
        for day in sorted(days):
            build(Lake(settings), "requests", day)
        return pl.from_arrow(Lake(settings).read(table("dwd.request"))).get_column("input_tokens").sum()

    first = ingest(settings, [AZURE_SAMPLE], mapping_file=wrong)
    days = {dt.date.fromisoformat(r["TIMESTAMP"][:10]) for r in rows}
    assert build_and_sum(days) == sum(int(r["GeneratedTokens"]) for r in rows)
    again = ingest(settings, [AZURE_SAMPLE], mapping_file=Path("azure_llm_2023_conv"))
    assert not again.landed and again.skipped[0].landed_as == first.landed[0].source  # says how it was landed
    assert again.skipped[0].source != again.skipped[0].landed_as
    version = Lake(settings).version(table("ods.request_log_raw"))
    fixed = ingest(settings, [AZURE_SAMPLE], mapping_file=Path("azure_llm_2023_conv"), reland=True)
    # One commit.
    assert fixed.landed[0].replaced and Lake(settings).version(table("ods.request_log_raw")) == version + 1
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert ods.height == len(rows) + 1  # replaced, not added: the header line and every row once
    assert ods.get_column("source").unique().to_list() == [fixed.landed[0].source]
    assert fixed.stale_dates == days  # the header line too: it takes the date of the lines around it
    assert build_and_sum(days) == sum(int(r["ContextTokens"]) for r in rows)
    assert pl.from_arrow(Lake(settings).read(table("dwd.request"))).height == len(rows)


def test_otlp_export_ingests_to_dwd(tmp_path: Path, strata_env: Path) -> None:
    from fixtures_otlp import otlp_export_line

    day = dt.date(2026, 2, 2)
    records = [{**_record(f"span-{i}", day), "ts": dt.datetime(2026, 2, 2, 8, i, tzinfo=dt.UTC)} for i in range(5)]
    path = tmp_path / "otlp" / "date=2026-02-02" / "traces-otlp.json"  # the broken line's date
    path.parent.mkdir(parents=True)
    path.write_bytes(otlp_export_line(records[:3]) + b"\n" + otlp_export_line(records[3:]) + b"\n{broken\n")
    settings = load_settings()
    ingest(settings, [path], fmt="otlp-json")
    report = build(Lake(settings), "requests", day)
    assert (report.books.ods_rows, report.books.dwd_rows, report.books.malformed) == (6, 5, 1)
    assert sorted(pl.from_arrow(Lake(settings).read(table("dwd.request"))).get_column("request_id").to_list()) == [
        f"span-{i}" for i in range(5)
    ]


def test_a_workflow_span_sent_alone_is_a_trace_only_line_not_malformed(tmp_path: Path, strata_env: Path) -> None:
    """An exporter that sends a workflow's parent span apart from its calls' spans lands a line holding
    no GenAI span: it parses and carries no request, so the books count it as trace-only, not malformed,
    and ``strata ingest`` and ``strata build dwd`` say so."""
    from fixtures_otlp import key_value, nanos, otlp_export_line
    from typer.testing import CliRunner

    from strata.cli import app

    day, trace = dt.date(2026, 2, 2), "ab" * 16
    calls = [
        {**_record(f"call-{i}", day), "ts": dt.datetime(2026, 2, 2, 12, i, tzinfo=dt.UTC), "trace_id": trace}
        for i in range(2)
    ]
    start = nanos(dt.datetime(2026, 2, 2, 11, 59, tzinfo=dt.UTC))
    workflow = {
        "traceId": trace,
        "spanId": "cd" * 8,
        "name": "workflow",
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 3 * 10**9),
        "attributes": [key_value("user.id", "bob")],
        "status": {},
    }
    parent_alone = {
        "resourceSpans": [
            {
                "resource": {"attributes": [key_value("service.name", "chat-app")]},
                "scopeSpans": [{"scope": {"name": "chat-app"}, "spans": [workflow]}],
            }
        ]
    }
    path = tmp_path / "otlp" / f"date={day}" / "traces.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(otlp_export_line(calls) + b"\n" + json.dumps(parent_alone).encode() + b"\n{broken\n")
    settings = load_settings()

    landed = CliRunner().invoke(app, ["ingest", str(path)])
    assert landed.exit_code == 0, landed.output
    assert "3 lines (1 malformed, 1 trace-only)" in " ".join(landed.output.split()), landed.output
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw"))).sort("line_no")
    assert ods.select("is_malformed", "parse_error").rows() == [(False, None), (False, None), (True, "invalid JSON")]
    assert [r["malformed"] for r in Lake(settings).read(table("ops.landed_files")).to_pylist()] == [1]

    built = CliRunner().invoke(app, ["build", "dwd", "--date", day.isoformat()])
    assert built.exit_code == 0, built.output
    said = " ".join(built.output.split())
    assert "ODS 4 = DWD 2 + duplicates 0 + quarantined 0 + malformed 1 + trace-only 1" in said, built.output
    books = Lake(settings).read_frame(table("ops.books")).filter(pl.col("table_name") == "dwd.request")
    assert books.select("ods_rows", "dwd_rows", "malformed", "trace_only", "balanced").rows() == [(4, 2, 1, 1, True)]
    quarantine = Lake(settings).read_frame(table("dwd.quarantine"))
    assert quarantine.get_column("rules").to_list() == [["line.invalid_json"]]


def test_ingesting_a_generated_folder_takes_only_the_logs(tmp_path: Path, strata_env: Path) -> None:
    out = tmp_path / "gen"
    manifest = generate(out, days=1, requests_per_day=200, seed=1, start=START)
    report = ingest(load_settings(), [out])  # manifest.json, prices.csv and quotas.csv sit beside the logs
    landed = {f.path.name for f in report.landed}
    assert not landed & {"manifest.json", "prices.csv", "quotas.csv"}
    assert (
        sum(f.lines for f in report.landed if f.table.name == "ods.request_log_raw")
        == manifest["days"][START.isoformat()]["lines"]
    )
    assert any(f.table.name == "ods.feedback_raw" for f in report.landed)


def test_an_otlp_batch_across_midnight_lands_every_span_in_its_own_day(tmp_path: Path, strata_env: Path) -> None:
    from fixtures_otlp import otlp_export_line

    first, second = dt.date(2026, 2, 2), dt.date(2026, 2, 3)
    midnight = dt.datetime(2026, 2, 3, tzinfo=dt.UTC)
    records = [{**_record(f"span-{i:02d}", first), "ts": midnight + dt.timedelta(seconds=i - 34)} for i in range(69)]
    path = tmp_path / "traces.json"  # no --format, a .json name: told by its content
    path.write_bytes(otlp_export_line(records) + b"\n" + otlp_export_line(records[40:42]) + b"\n")
    settings = load_settings()
    report = ingest(settings, [path])
    assert report.landed[0].source == "otlp-json" and report.dates == [first, second]
    ods = table_frame(settings, "ods.request_log_raw").sort("line_no")
    assert ods.height == 2 and ods.get_column("event_date").to_list() == [first, second]  # one row a line
    assert ods.get_column("event_dates").to_list() == [[first, second], None]
    books = {}
    for day in (second, first, second):  # the second day built twice: idempotent
        books[day] = build_day(Lake(settings), day)["requests"].books
    assert (books[first].ods_rows, books[first].dwd_rows) == (34, 34)
    assert (books[second].ods_rows, books[second].dwd_rows, books[second].duplicates) == (37, 35, 2)
    dwd = table_frame(settings, "dwd.request")
    assert sorted(dwd.get_column("request_id").to_list()) == [r["request_id"] for r in records]
    assert dwd.group_by("event_date").len().sort("event_date").get_column("len").to_list() == [34, 35]
    assert table_frame(settings, "dwd.quarantine").height == 0
    assert ingest(settings, [path], reland=True).stale_dates == {first, second}  # both days' DWD is stale
    from warehouse.ods.unland import unland

    assert unland(settings, [path]).stale_dates == {first, second}


def _span_record(request_id: str) -> dict:
    return {**_record(request_id, dt.date(2026, 2, 2)), "ts": dt.datetime(2026, 2, 2, 9, tzinfo=dt.UTC)}


def test_ingest_tells_otlp_by_content_and_names_the_files_it_does_not_read(tmp_path: Path, strata_env: Path) -> None:
    from fixtures_otlp import otlp_export_line

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "spans.jsonl").write_bytes(otlp_export_line([_span_record("s-1")]) + b"\n")
    (folder / "metrics.json").write_text('{"resourceMetrics":[{"resource":{}}]}\n')
    (folder / "logs.json").write_text('{"resourceLogs":[]}\n')
    (folder / "manifest.json").write_text('{"days": 1}\n')
    settings = load_settings()
    report = ingest(settings, [folder])
    assert [(f.path.name, f.source) for f in report.landed] == [("spans.jsonl", "otlp-json")]
    assert {p.name: why for p, why in report.passed_over} == {
        "metrics.json": "an OpenTelemetry metrics export (Strata reads OTLP traces)",
        "logs.json": "an OpenTelemetry logs export (Strata reads OTLP traces)",
        "manifest.json": "a .json file that is not an OTLP trace export",
    }
    with pytest.raises(InputError, match=r"metrics export .*\(OTEL_TRACES_EXPORTER\)"):
        ingest(settings, [folder / "metrics.json"], fmt="otlp-json")
    with pytest.raises(InputError, match="the format jsonl"):
        ingest(settings, [folder / "manifest.json"])


def test_spans_without_a_tenant_take_the_sources_then_the_service_name(tmp_path: Path, strata_env: Path) -> None:
    from fixtures_otlp import key_value, span

    day = dt.date(2026, 2, 2)

    def export(name: str, resource: list[dict]) -> Path:
        doc = {
            "resourceSpans": [
                {
                    "resource": {"attributes": resource},
                    "scopeSpans": [{"spans": [span({**_span_record(name), "tenant_id": None})]}],
                }
            ]
        }
        return _write(tmp_path / f"{name}.json", [doc])

    settings = load_settings()
    ingest(settings, [export("sourced", [key_value("service.name", "svc")])], tenant="acme")
    ingest(settings, [export("serviced", [key_value("service.name", "svc")]), export("lost", [])])
    run = build(Lake(settings), "requests", day)
    tenants = dict(table_frame(settings, "dwd.request").select("request_id", "tenant_id").iter_rows())
    assert tenants == {"sourced": "acme", "serviced": "svc"}
    assert run.rules == {"tenant_id.required": 1}


def test_a_request_logged_both_as_a_line_and_as_a_span_is_one_row(tmp_path: Path, strata_env: Path) -> None:
    """A gateway's JSON log line and its trace span of one call (the same response id) on one day: one row,
    the other a duplicate (the span was checked only against other spans: in the line's batch it was
    quarantined as primary_key.unique, in a later batch the day's audit failed on the repeated key)."""
    from fixtures_otlp import otlp_export_line

    day = dt.date(2026, 3, 4)
    settings = load_settings()
    _write(tmp_path / "logs" / "gateway.jsonl", [_record("call-1", day), _record("call-2", day)])
    at = dt.datetime.combine(day, dt.time(13), dt.UTC)
    spans = [{**_record(i, day), "ts": at, "attributes": {}} for i in ("call-1", "call-3")]
    (tmp_path / "logs" / "traces.otlp.jsonl").write_bytes(otlp_export_line(spans) + b"\n")
    assert not ingest(settings, [tmp_path / "logs"]).failed
    report = build_day(Lake(settings), day)["requests"]
    dwd = table_frame(settings, "dwd.request")
    assert sorted(dwd.get_column("request_id").to_list()) == ["call-1", "call-2", "call-3"]
    assert report.books.dwd_rows == 3 and report.books.duplicates == 1
