"""ODS and DWD against hostile or mistaken input: nothing lost, nothing leaked, every mistake undoable."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from contracts.errors import InputError
from warehouse.dwd.build import build, build_day
from warehouse.ods.ingest import ingest
from warehouse.ops.forget import forget_user
from warehouse.ops.retention import apply_retention
from warehouse.settings import ConfigError, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_QUARANTINE, DWD_REQUEST, ODS_REQUESTS, OPS_AUDIT_LOG, OPS_LANDED_FILES, all_tables

DAY = dt.date(2026, 3, 1)
STRATA = [sys.executable, "-m", "strata.cli"]


def record(request_id: str, day: dt.date = DAY, **fields: object) -> dict:
    base = {
        "request_id": request_id,
        "ts": f"{day.isoformat()}T09:00:00Z",
        "duration_ms": 10.0,
        "tenant_id": "t1",
        "user_id": "u1",
        "operation": "chat",
        "model": "m1",
        "input_tokens": 3,
        "output_tokens": 4,
        "status_code": 200,
    }
    base.update(fields)
    return base


def write_lines(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STRATA, *args],
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_exact_types(settings) -> None:
    """Every data file of every table holds exactly its contract's Arrow types."""
    from contracts import arrow_schema

    for table in all_tables():
        if Lake(settings).open_table(table) is None:
            continue
        want = {f.name: f.type for f in arrow_schema(table.contract) if f.name not in table.partition_columns}
        for fragment in Lake(settings).snapshot(table).get_fragments():
            found = {f.name: f.type for f in pq.read_schema(fragment.path, filesystem=fragment.filesystem)}
            assert {k: found.get(k) for k in want} == want, (table.name, fragment.path)


def test_ingest_after_forget_and_every_rewrite_keeps_exact_types(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    write_lines(tmp_path / "a" / "requests.jsonl", [record("r1", user_id="victim"), record("r2")])
    feedback = tmp_path / "a" / "feedback" / "fb.jsonl"
    write_lines(
        feedback, [{"request_id": "r2", "ts": f"{DAY}T12:00:00Z", "kind": "thumb", "value": "up", "source": "app"}]
    )
    ingest(settings, [tmp_path / "a"])
    build_day(Lake(settings), DAY)
    forget_user(settings, "victim")  # rewrites ODS, DWD, the quarantine
    assert_exact_types(settings)
    report = ingest(settings, [write_lines(tmp_path / "b.jsonl", [record("r3")])])  # failed before: string_view
    assert [f.lines for f in report.landed] == [1]
    write_lines(
        tmp_path / "c" / "feedback" / "late.jsonl",
        [
            {  # late feedback: a relabel (was a Delta MERGE)
                "request_id": "r3",
                "ts": f"{DAY + dt.timedelta(days=1)}T08:00:00Z",
                "kind": "flag",
                "value": "spam",
                "source": "trust",
            }
        ],
    )
    ingest(settings, [tmp_path / "c"])
    build_day(Lake(settings), DAY)
    build_day(Lake(settings), DAY + dt.timedelta(days=1))
    assert Lake(settings).read_frame(DWD_REQUEST).filter(pl.col("request_id") == "r3")["feedback_value"].to_list() == [
        "spam"
    ]
    ingest(settings, [tmp_path / "b.jsonl"], reland=True)
    apply_retention(settings, days=1, today=DAY + dt.timedelta(days=10))
    assert_exact_types(settings)


def test_a_mapping_is_checked_before_anything_is_written_and_kept_only_when_lines_land(
    tmp_path: Path, strata_env: Path
) -> None:
    settings = load_settings()
    sample = write_lines(tmp_path / "trace.jsonl", [{"id": "x1", "t": 1772355600000, "tok": 5}])
    escaping = tmp_path / "escape.yaml"
    escaping.write_text(
        'name: "../../../../tmp/strata-escape"\nformat: jsonl\nfields: {request_id: id, ts: t}\n'
        "timestamp: {unit: ms}\nconstants: {tenant_id: t, model: m}\n"
    )
    with pytest.raises(InputError, match=r"escape\.yaml: name:"):
        ingest(settings, [sample], mapping_file=escaping)
    assert not Path(settings.lake_uri).exists() and not Path("/tmp/strata-escape.yaml").exists()

    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text(
        "name: mytrace\nformat: jsonl\nfields: {request_id: id, ts: t, input_tokens: tokn}\n"
        "timestamp: {unit: ms}\nconstants: {tenant_id: t, model: m}\n"
    )
    report = ingest(settings, [sample], mapping_file=misspelt)
    assert any("input_tokens" in w and "'tokn'" in w for w in report.warnings), report.warnings
    registered = sorted(p.name for p in (Path(settings.lake_uri) / "ods" / "_mappings").iterdir())
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(misspelt.read_text().replace("tokn", "tok"))
    again = ingest(settings, [sample], mapping_file=fixed)  # already landed: skipped, nothing lands
    assert not again.landed
    assert sorted(p.name for p in (Path(settings.lake_uri) / "ods" / "_mappings").iterdir()) == registered


def test_implausible_timestamps_are_quarantined_with_their_own_rules(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    lines = [
        record("ok"),
        record("y1969", ts="1969-12-31T23:00:00Z"),
        record("y1970", ts="1970-01-01T00:00:01Z"),
        record("y1999", ts="1999-06-01T00:00:00Z"),
        record("epoch_s", ts=1772355600),  # seconds, read as ms
        record("inf", duration_ms="Infinity"),
    ]
    ingest(settings, [write_lines(tmp_path / f"date={DAY}" / "r.jsonl", lines)])
    result = build(Lake(settings), "requests", DAY)
    rules = {r["request_id"]: r["rules"] for r in Lake(settings).read_frame(DWD_QUARANTINE).iter_rows(named=True)}
    assert result.published == 1 and set(rules) == {"y1969", "y1970", "y1999", "epoch_s", "inf"}
    assert all("ts.floor" in rules[r] and "ts.event_date" in rules[r] for r in ("y1969", "y1970", "y1999", "epoch_s"))
    assert rules["inf"] == ["duration_ms.type"]
    assert result.books is not None and result.books.balanced


def test_a_trace_whose_mapping_forgot_its_epoch_offset_is_quarantined_whole(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    trace = write_lines(tmp_path / f"date={DAY}" / "trace.jsonl", [{"id": f"x{i}", "t": 60 * i} for i in range(5)])
    mapping = tmp_path / "relative.yaml"  # seconds since the trace started, and no epoch_offset_s
    mapping.write_text(
        "name: relative\nformat: jsonl\nfields: {request_id: id, ts: t}\ntimestamp: {unit: s}\n"
        "constants: {tenant_id: t, model: m}\n"
    )
    ingest(settings, [trace], mapping_file=mapping)
    result = build(Lake(settings), "requests", DAY)
    assert result.published == 0 and result.rules.get("ts.floor") == 5


def test_a_build_without_its_key_writes_nothing(
    tmp_path: Path, strata_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_lines(
        tmp_path / "feedback" / "fb.jsonl",
        [{"request_id": "r1", "ts": f"{DAY}T12:00:00Z", "kind": "thumb", "value": "up", "source": "app"}],
    )
    write_lines(tmp_path / "requests.jsonl", [record("r1")])
    ingest(load_settings(), [tmp_path])
    monkeypatch.delenv("STRATA_PSEUDONYM_KEY")
    settings = load_settings()
    versions = {t.name: Lake(settings).version(t) for t in all_tables()}
    with pytest.raises(ConfigError, match="STRATA_PSEUDONYM_KEY"):
        build_day(Lake(settings), DAY)
    assert {t.name: Lake(settings).version(t) for t in all_tables()} == versions


def test_a_commit_refused_by_a_concurrent_writer_leaves_its_audit_row(tmp_path: Path, strata_env: Path) -> None:
    # Two homes sharing one lake: their locks cannot see each other, so Delta's own commit is the
    # last line of defence — and the refused attempt must still be in the audit log.
    lake_root = tmp_path / "shared-lake"
    slow = (
        "import datetime as dt, sys, time\n"
        "import polars as pl\n"
        "from warehouse.settings import load_settings\n"
        "from warehouse.storage.lake import Lake\n"
        "from warehouse.storage.publish import publish\n"
        "from warehouse.tables import OPS_BOOKS\n"
        "def rows():\n"
        "    print('writing', flush=True); time.sleep(4)\n"
        "    yield pl.DataFrame({'table_name': ['dwd.request'], 'event_date': [dt.date(2026, 3, 1)], 'ods_rows': [1],"
        " 'dwd_rows': [1], 'duplicates': [0], 'quarantined': [0], 'malformed': [0], 'balanced': [True]})\n"
        "publish(Lake(load_settings()), OPS_BOOKS, rows(), partitions=[{'event_date': dt.date(2026, 3, 1)}],"
        " expectations=False)\n"
    )
    env = {**os.environ, "STRATA_LAKE_URI": str(lake_root)}
    existing = subprocess.run(
        [
            sys.executable,
            "-c",
            slow.replace("time.sleep(4)", "pass").replace("dt.date(2026, 3, 1)", "dt.date(2026, 2, 28)"),
        ],
        env={**env, "STRATA_HOME": str(tmp_path / "h0")},
    )
    assert existing.returncode == 0  # the table exists: its first commit is not a race of creations
    first = subprocess.Popen(
        [sys.executable, "-c", slow],
        env={**env, "STRATA_HOME": str(tmp_path / "h1")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None and first.stdout.readline().strip() == "writing"
    second = subprocess.run(
        [sys.executable, "-c", slow.replace("time.sleep(4)", "pass")],
        env={**env, "STRATA_HOME": str(tmp_path / "h2")},
        capture_output=True,
        text=True,
    )
    assert second.returncode == 0, second.stderr
    _, err = first.communicate(timeout=120)
    assert first.returncode != 0 and "concurrent" in err.lower(), err
    settings = load_settings({**env, "STRATA_HOME": str(tmp_path / "h1")})
    audit = (
        Lake(settings)
        .read_frame(OPS_AUDIT_LOG)
        .filter(pl.col("table_name") == "ops.books", pl.col("partition") == "event_date = '2026-03-01'")
    )
    assert sorted(audit["status"].to_list()) == ["failed", "published"]
    assert "concurrent" in audit.filter(pl.col("status") == "failed")["message"][0].lower()


def test_a_file_landed_by_mistake_is_reported_and_can_be_unlanded(tmp_path: Path, strata_env: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"days": {"2026-03-01": {"lines": 3}}, "files": ["a", "b"]}, indent=2))
    landed = cli("ingest", "--format", "jsonl", str(manifest))
    assert landed.returncode == 1 and "every one of the" in landed.stderr and "strata unland" in landed.stderr
    settings = load_settings()
    assert Lake(settings).read(ODS_REQUESTS).num_rows == manifest.read_text().count("\n") + 1  # archived anyway

    undone = cli("unland", str(manifest))
    assert undone.returncode == 0, undone.stderr
    assert Lake(settings).read(ODS_REQUESTS).num_rows == 0
    ledger = Lake(settings).read_frame(OPS_LANDED_FILES)
    assert ledger.height == 1 and ledger["unlanded_at"][0] is not None  # remembered, stamped
    assert cli("ingest", "--format", "jsonl", str(manifest)).returncode == 0  # skipped: it was seen
    assert Lake(settings).read(ODS_REQUESTS).num_rows == 0
    assert not ingest(settings, [manifest], fmt="jsonl").landed
    assert ingest(settings, [manifest], fmt="jsonl", reland=True).landed  # but it may land again on purpose


def test_one_unreadable_gzip_does_not_stop_the_others(tmp_path: Path, strata_env: Path) -> None:
    folder = tmp_path / "landing"
    write_lines(folder / "a.jsonl", [record("a1")])
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(b'{"request_id": "b1"}\n')[:-8] + b"garbage!")
    write_lines(folder / "c.jsonl", [record("c1")])
    result = cli("ingest", str(folder))
    assert result.returncode == 1
    assert "b.jsonl.gz" in result.stderr and "not landed" in result.stderr
    assert "landed 2 file(s)" in result.stdout
    assert sorted(Lake(load_settings()).read_frame(ODS_REQUESTS)["request_id"].to_list()) == ["a1", "c1"]


def test_a_folder_named_for_no_calendar_date_stops_only_its_file(tmp_path: Path, strata_env: Path) -> None:
    """``date=2026-13-45`` aborted the whole run ("month must be in 1..12") and the good file did not land."""
    folder = tmp_path / "landing"
    write_lines(folder / f"date={DAY}" / "good.jsonl", [record("g1"), record("g2")])
    bad = write_lines(folder / "date=2026-13-45" / "bad.jsonl", [record("b1")])
    for run in ("first", "again"):
        result = cli("ingest", str(folder))
        assert result.returncode == 1, (run, result.stdout, result.stderr)
        said = " ".join(result.stderr.split())
        assert f"not landed: {bad}: its path names the date 2026-13-45, which is no calendar date" in said, run
        assert f"landed {1 if run == 'first' else 0} file(s), {2 if run == 'first' else 0} lines" in result.stdout
    assert sorted(Lake(load_settings()).read_frame(ODS_REQUESTS)["request_id"].to_list()) == ["g1", "g2"]


def test_lineage_is_absolute_and_every_write_says_which_lake(tmp_path: Path, strata_env: Path) -> None:
    day_folder = tmp_path / f"date={DAY}"
    write_lines(day_folder / "r.jsonl", [record("r1"), record("r2", ts=f"{DAY + dt.timedelta(days=1)}T01:00:00Z")])
    result = subprocess.run(
        [*STRATA, "ingest", f"date={DAY}/r.jsonl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"lake: {load_settings().lake_uri}" in result.stderr
    text = " ".join(result.stdout.split())
    later = DAY + dt.timedelta(days=1)
    assert f"strata build dwd --date {DAY} --date {later}" in text  # what to run next
    ods = Lake(load_settings()).read_frame(ODS_REQUESTS)
    assert ods["source_file"].unique().to_list() == [str(day_folder / "r.jsonl")]


def test_long_listings_are_summarised_and_paths_shortened_only_from_the_middle(
    tmp_path: Path, strata_env: Path
) -> None:
    deep = tmp_path / ("a-very-long-folder-name-" * 4) / "landing"
    for i in range(15):
        write_lines(deep / f"requests-{i:02d}.jsonl", [record(f"r{i}")])
    assert cli("ingest", str(deep)).returncode == 0
    again = cli("ingest", str(deep), env={"COLUMNS": "80"})
    # At 80 columns rich folds a long path over lines: joined again, the lines are the messages.
    said = "".join(again.stdout.splitlines())
    listed = re.findall(r"skipped (\S+) \(already landed in ods\.request_log_raw as jsonl\)", said)
    assert listed == [str(deep / f"requests-{i:02d}.jsonl") for i in range(10)]  # the first ten, in order
    assert "skipped 5 more file(s) already landed (`strata landed` lists every landed file)" in again.stdout
    # At 80 columns a path keeps its start and its file's name whole, on one line; --full prints it whole.
    landed = cli("landed", "--last", "1", env={"COLUMNS": "80"})
    rows = [line.split("│")[2].strip() for line in landed.stdout.splitlines() if line.count("│") > 3]
    assert len(rows) == 1 and rows[0].startswith("/tmp/…/") and rows[0].endswith("/requests-14.jsonl")  # landed last
    full = cli("landed", "--last", "1", "--full", env={"COLUMNS": "80"})
    joined = "".join(line.split("│")[2].strip() for line in full.stdout.splitlines() if line.count("│") >= 3)
    assert joined == str(deep / "requests-14.jsonl")


#: Ids unfit to be keys, each with the rule that quarantines it (issue 32, item 6).
UNFIT_IDS = {
    "nul_tenant": ({"tenant_id": "a\x00b"}, "tenant_id.pattern"),
    "del_tenant": ({"tenant_id": "t\x7f"}, "tenant_id.pattern"),
    "long_tenant": ({"tenant_id": "t" * 257}, "tenant_id.max_length"),
    "escape_model": ({"model": "m\x1b[31m"}, "model.pattern"),
    "long_model": ({"model": "m" * 5000}, "model.max_length"),
    "c1_version": ({"model_version": "v\x85"}, "model_version.pattern"),
    "long_version": ({"model_version": "v" * 300}, "model_version.max_length"),
    "newline_user": ({"user_id": "u\nv"}, "user_id.pattern"),
    "long_user": ({"user_id": "u" * 100_000}, "user_id.max_length"),
}


def test_ids_unfit_to_be_keys_are_quarantined_and_never_served(tmp_path: Path, strata_env: Path) -> None:
    from typer.testing import CliRunner

    from features.online import get_online_features
    from strata.cli import app

    settings = load_settings()
    wide = "é" * 256  # 256 characters (512 bytes): the longest id allowed
    lines = [
        record("ok", model_version="v1"),
        record("wide", tenant_id=wide, user_id=wide, model=wide, model_version=wide),
        *(record(request_id, **fields) for request_id, (fields, _) in UNFIT_IDS.items()),
    ]
    landing = write_lines(tmp_path / "landing" / f"date={DAY}" / "r.jsonl", lines)
    runner = CliRunner()
    for args in (
        ["ingest", str(landing)],
        ["build", "dwd", "--date", DAY.isoformat()],
        ["build", "dws", "--date", DAY.isoformat()],
        ["features", "materialize"],
    ):
        done = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert done.exit_code == 0, (args, done.output)

    quarantined = {r["request_id"]: r["rules"] for r in Lake(settings).read_frame(DWD_QUARANTINE).iter_rows(named=True)}
    assert quarantined == {request_id: [rule] for request_id, (_, rule) in UNFIT_IDS.items()}
    assert sorted(Lake(settings).read_frame(DWD_REQUEST)["request_id"]) == ["ok", "wide"]

    def served(entity: str, key: str) -> bool:
        return any(v is not None for v in get_online_features(settings, entity, key).values())

    assert served("tenant", "t1") and served("tenant", wide)
    assert served("model_version", "m1@v1") and served("model_version", f"{wide}@{wide}")
    assert served("user", "u1") and served("user", wide)
    for fields, _ in UNFIT_IDS.values():
        unfit = record("", **fields)
        entity, key = {
            "tenant_id": ("tenant", unfit["tenant_id"]),
            "model": ("model_version", f"{unfit['model']}@unknown"),
            "model_version": ("model_version", f"{unfit['model']}@{unfit.get('model_version')}"),
            "user_id": ("user", unfit["user_id"]),
        }[next(iter(fields))]
        assert not served(entity, key), (entity, key[:20])
