"""``strata explain`` on a generated lake: one mart row's DWD rows against DWD read directly, every ODS line of its
day accounted for against ODS, the quarantine and DWD read directly; the versions the build recorded equal the
Delta log's when it ran; after retention and forget remove the versions it read, explain says so and shows the
rows as they are; raw lines only with ``--raw``, and a forgotten user's rows show nothing of them."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import shlex
from collections.abc import Iterator

import polars as pl
import pytest
from deltalake import DeltaTable

from contracts.errors import InputError
from strata import pipeline
from synthetic_workload import generate
from tests.integration.test_ads import START
from tests.terminal import run_on_terminal
from warehouse.ads.build import MARTS, SOURCES, build
from warehouse.ads.explain import explain
from warehouse.errors import NoData
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_QUARANTINE, DWD_REQUEST, ODS_REQUESTS, OPS_AUDIT_LOG, Table, table

KEY = "test-key-0123456789abcdef"
Built = tuple[Settings, dict[str, str], dict[str, int]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Two generated days landed, built to DWD and ADS; the environment; each source's version before ADS."""
    home, landing = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("landing")
    env = {"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY}
    settings = load_settings(env)
    manifest = generate(landing, days=2, requests_per_day=5_000, seed=41, start=START, fault_rate=0.01)
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    pipeline.load_quotas(settings, landing / "quotas.csv")
    days = [dt.date.fromisoformat(d) for d in manifest["days"]]
    for day in days:
        pipeline.build_dwd(settings, day)
    versions = {
        t.name: DeltaTable(t.uri(settings)).version() for t in SOURCES if DeltaTable.is_deltatable(t.uri(settings))
    }
    build(Lake(settings), days)
    yield settings, env, versions


def _read(settings: Settings, name: Table | str) -> pl.DataFrame:
    return pl.read_delta((table(name) if isinstance(name, str) else name).uri(settings))


def _busiest(settings: Settings, mart: str, by: str) -> dict[str, object]:
    """The row of ``mart`` on the first day with the most ``by``."""
    rows = _read(settings, mart).filter(pl.col("event_date") == START).sort(by, descending=True)
    return rows.row(0, named=True)


def _pairs(mart: str, row: dict[str, object]) -> list[str]:
    return [f"{c}={row[c]}" for c in table(mart).contract.primary_key]


def test_the_versions_recorded_equal_the_delta_log_at_build_time(built: Built) -> None:
    settings, _, versions = built
    log = _read(settings, OPS_AUDIT_LOG).filter(pl.col("table_name").str.starts_with("ads."))
    assert set(log.get_column("table_name")) == {m.name for m in MARTS}
    for name, reads, at in log.select("table_name", "read_tables", "read_versions").rows():
        assert dict(zip(reads, at)) == versions, name


def test_every_ods_line_of_a_rows_day_is_accounted_for(built: Built) -> None:
    settings, _, versions = built
    row = _busiest(settings, "ads.model_daily", "requests")
    found = explain(Lake(settings), "ads.model_daily", _pairs("ads.model_daily", row))
    assert found.dwd_as_built and found.dwd_version == versions[DWD_REQUEST.name]
    assert all(r.gone is None and r.version == versions[r.table] for r in found.reads)
    requests = _read(settings, DWD_REQUEST).filter(pl.col("event_date") == START)
    mine = requests.filter(
        (pl.col("model") == row["model"]) & (pl.col("model_version").fill_null("(none)") == row["model_version"])
    )
    assert found.rows == mine.height == row["requests"]
    assert {r["request_id"] for r in found.sample} <= set(mine.get_column("request_id"))
    lineage = mine.select("source_file", "line_no").unique()
    assert sum(f.lines for f in found.lines) == lineage.height
    # every ODS line of the day, its fate read from ODS, DWD and the quarantine directly
    ods = (
        _read(settings, ODS_REQUESTS)
        .filter(pl.col("event_date") == START)
        .select("source_file", "line_no", "request_id")
    )
    spans = _read(settings, "dwd.span").select("source_file", "line_no")
    quarantine = _read(settings, DWD_QUARANTINE)
    dwd_lines = pl.concat([requests.select("source_file", "line_no"), spans]).unique()
    fates = ods.with_columns(
        pl.when(pl.struct("source_file", "line_no").is_in(lineage.to_struct().implode()))
        .then(pl.lit("summarised"))
        .when(pl.struct("source_file", "line_no").is_in(dwd_lines.to_struct().implode()))
        .then(pl.lit("other_rows"))
        .when(
            pl.struct("source_file", "line_no").is_in(quarantine.select("source_file", "line_no").to_struct().implode())
        )
        .then(pl.lit("quarantined"))
        .when(pl.col("request_id").is_in(mine.get_column("request_id").implode()))
        .then(pl.lit("duplicates_of_these"))
        .when(pl.col("request_id").is_in(requests.get_column("request_id").implode()))
        .then(pl.lit("duplicates"))
        .otherwise(pl.lit("unaccounted"))
        .alias("fate")
    )
    counted = dict(fates.group_by("fate").len().rows())
    (day,) = found.partitions
    assert counted.get("unaccounted", 0) == 0 and day.unaccounted == 0
    assert day.ods_lines == ods.height == sum(counted.values())
    for fate in ("summarised", "other_rows", "quarantined", "duplicates_of_these", "duplicates"):
        assert getattr(day, fate) == counted.get(fate, 0), fate
    assert day.quarantined > 0 and day.duplicates + day.duplicates_of_these > 0
    rules = quarantine.filter(pl.col("event_date") == START).explode("rules").group_by("rules").len()
    assert day.rules == dict(rules.rows())


def test_instance_and_shape_rows_are_their_rows(built: Built) -> None:
    settings, _, _ = built
    shape = _busiest(settings, "ads.trace_breakdown", "traces")
    found = explain(Lake(settings), "ads.trace_breakdown", _pairs("ads.trace_breakdown", shape))
    assert sum(found.rows_by_table.values()) == shape["traces"] * (shape["steps_per_trace"] + 1)
    drift = _read(settings, "ads.server_drift").sort("server_instance").row(0, named=True)
    found = explain(Lake(settings), "ads.server_drift", _pairs("ads.server_drift", drift))
    instance = _read(settings, DWD_REQUEST).filter(pl.col("server_instance") == drift["server_instance"])
    assert found.rows == instance.height
    assert [p.event_date for p in found.partitions] == sorted(set(instance.get_column("event_date")))


def test_on_a_terminal_raw_lines_only_with_raw_and_a_bad_key_is_one_line(built: Built) -> None:
    settings, env, _ = built
    row = _busiest(settings, "ads.tenant_daily", "requests")
    args = ["explain", "ads.tenant_daily", *_pairs("ads.tenant_daily", row)]
    screen = run_on_terminal(args, env)
    assert screen.returncode == 0, screen.text
    assert all(len(line) <= 80 for line in screen.lines)
    assert "every ODS line of" in screen.text and "dwd.request" in screen.text and "--raw" in screen.text
    assert '"request_id"' not in screen.text and '"user_id"' not in screen.text
    raw = run_on_terminal([*args, "--raw"], env, columns=200)
    assert raw.returncode == 0 and '"request_id":"' in raw.text
    for bad, why in (([f"event_date={START}"], "missing tenant_id"), ([f"event_date={START}", "tenant=x"], "tenant=x")):
        screen = run_on_terminal(["explain", "ads.tenant_daily", *bad], env, columns=200)
        assert screen.returncode == 1 and len(screen.lines) == 1, screen.text
        assert screen.lines[0].startswith("error:") and why in screen.text and "event_date, tenant_id" in screen.text


def test_the_reports_rows_name_the_command_that_opens_each(built: Built) -> None:
    """The slowest workflows name ``strata trace`` of their longest trace, flagged rows ``strata explain`` of theirs,
    and each command opens what it names."""
    from strata.report import operators
    from strata.report.view import LakeView
    from warehouse.dwd.trace import trace

    settings, _, _ = built
    view = LakeView.open(settings, START, START + dt.timedelta(days=1))
    (steps,) = operators.workflows(view).tables
    opened = re.findall(r"strata trace ([0-9a-f]{32})", steps)
    shapes = _read(settings, "ads.trace_breakdown")
    assert len(opened) == shapes.get_column("shape").n_unique()
    longest = max(shapes.get_column("duration_p95_ms"))
    found = [trace(Lake(settings), trace_id) for trace_id in opened]
    assert max((f.end - f.start).total_seconds() * 1000 for f in found) >= longest
    flagged = _read(settings, "ads.retry_policy").filter(pl.col("is_flagged"))
    (pairs,) = operators.retry_waste(view).tables
    commands = [html.unescape(c) for c in re.findall(r"strata explain [^<]*", pairs)]
    assert len(commands) == flagged.height > 0
    for command in commands:
        _, _, mart, *key = shlex.split(command)
        assert explain(Lake(settings), mart, key).rows > 0


def test_a_key_is_a_value_never_sql_and_only_a_mart_is_explained(built: Built) -> None:
    """An attacker's key: quoted into a literal (no row has it), typed by the contract (a date that carries SQL is
    no date), and a table that is not a mart (the raw lines', the audit log) is refused before anything is read."""
    settings, _, _ = built
    lake = Lake(settings)
    with pytest.raises(NoData, match="has no row"):
        explain(lake, "ads.tenant_daily", [f"event_date={START}", "tenant_id=x' OR '1'='1"])
    with pytest.raises(InputError, match=r"is not a date \(YYYY-MM-DD\)"):
        explain(lake, "ads.tenant_daily", [f"event_date={START}'; COPY (SELECT 1) TO '/tmp/x", "tenant_id=t"])
    for name in ("ods.request_log_raw", "ops.audit_log", "dwd.request", "ads.model_daily; DROP TABLE x"):
        with pytest.raises(InputError, match="not a mart explain takes"):
            explain(lake, name, [f"event_date={START}"])


def test_after_retention_and_forget_explain_says_the_versions_read_are_gone(built: Built) -> None:
    """Last in the module: retention removes the first day's raw lines, then a user is forgotten."""
    settings, env, _ = built
    row = _busiest(settings, "ads.tenant_daily", "requests")
    pairs = _pairs("ads.tenant_daily", row)
    before = explain(Lake(settings), "ads.tenant_daily", pairs, raw=True)
    user = next(json.loads(line)["user_id"] for line in before.raw_lines.values() if b'"user_id"' in line)
    pipeline.apply_retention(settings, days=1, today=START + dt.timedelta(days=2))
    found = explain(Lake(settings), "ads.tenant_daily", pairs)
    gone = {r.table: r.gone for r in found.reads}
    assert gone[DWD_QUARANTINE.name] == "its files were vacuumed" and gone[DWD_REQUEST.name] is None
    assert found.dwd_as_built and found.partitions[0].ods_lines == 0
    screen = run_on_terminal(["explain", "ads.tenant_daily", *pairs], env, columns=120)
    assert "gone: its files were vacuumed" in screen.text

    requests = _read(settings, DWD_REQUEST).filter(
        (pl.col("event_date") == START) & (pl.col("tenant_id") == row["tenant_id"]) & pl.col("model").is_not_null()
    )
    pipeline.forget(settings, user)
    after = _read(settings, DWD_REQUEST)
    forgotten = set(requests.get_column("request_id")) - set(after.get_column("request_id"))
    found = explain(Lake(settings), "ads.tenant_daily", pairs, raw=True)
    assert forgotten and not found.dwd_as_built and "gone" in _read_state(found, DWD_REQUEST.name)
    assert found.rows == requests.height - len(forgotten)
    assert not {r["request_id"] for r in found.sample} & forgotten
    screen = run_on_terminal(["explain", "ads.tenant_daily", *pairs, "--raw"], env, columns=200)
    assert screen.returncode == 0 and user not in screen.text, screen.text
    assert "the version the build read is gone" in screen.text


def _read_state(found: object, name: str) -> str:
    read = next(r for r in found.reads if r.table == name)  # type: ignore[attr-defined]
    return "readable" if read.gone is None else f"gone: {read.gone}"
