"""The demo behind `make demo`: the real DAGs through Airflow, self-checking, apart from a real lake.

(A rerun of the same dates leaving every table equal is tested on the DAGs themselves, in
tests/integration/test_dags_run.py.)
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.demo import demo_settings, env_line, reset
from strata.lake_report import open_commands
from strata.orchestration.dag_runs import Run, run_dags
from tests.terminal import run_on_terminal
from warehouse.errors import NoData
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import table


@pytest.mark.timeout(1800)
def test_demo_runs_the_dags_end_to_end_and_prints_the_lake(tmp_path: Path) -> None:
    env = {"STRATA_HOME": str(tmp_path), "STRATA_PSEUDONYM_KEY": ""}  # as `make demo` runs it, on 80×24
    screen = run_on_terminal(["demo", "--days", "1", "--requests-per-day", "800"], env, timeout=1800)
    assert screen.returncode == 0, "\n".join(screen.lines[-60:])
    out, joined = screen.text, "".join(screen.lines)  # joined: a line longer than the screen, whole again
    # What stays on the screen: one bar of the DAG runs, not a stale one per run (they were 22), and each
    # run's line broken between its clauses only (it broke mid-number: `15.3` / `s;`), continued indented.
    assert sum(line.startswith("DAG runs:") for line in screen.lines) == 1, out
    start_runs = next(i for i, line in enumerate(screen.lines) if line.startswith("  ✓"))
    runs = screen.lines[start_runs : next(i for i, line in enumerate(screen.lines) if line.startswith("DAG runs:"))]
    assert all(line.startswith(("  ✓ ", "    ")) and not line[-1].isdigit() for line in runs), runs
    assert any(line.startswith("    ") for line in runs)  # a run's line wider than the screen was continued
    start = dt.date.fromisoformat(json.loads((tmp_path / "demo" / "demo.json").read_text())["start"])
    today = dt.datetime.now(dt.UTC).date()
    assert start == today - dt.timedelta(days=4)  # 1 day of traffic and 3 of late reviews: the last is yesterday
    assert f"✓ strata_ingest {start}" in out and f"✓ strata_daily {start}" in out
    assert "= manifest" in out and "≠ manifest" not in out and "✗" not in out.split("3/3")[0]
    for title in ("tables", "quarantined rows by rule", "the books per day: ODS rows = DWD rows"):
        assert title in out
    assert "dwd.request" in out and "ops.books" in out
    # One headline line per operators' mart, continued indented between its clauses
    for mart in ("capacity", "cold_starts", "server_drift", "token_anomalies", "retry_policy", "trace_breakdown"):
        assert any(line.startswith(f"ads.{mart}:") for line in screen.lines), mart
    # Every section or layer not built yet says so in one line, never a made-up table.
    for line in out.splitlines():
        if "not built yet" in line or "skipped" in line:
            assert len(line) < 200
    assert "strata airflow up" in out
    # The last run wrote the week's report into the demo's lake; the demo names it and the command that copies it.
    last = start.isoformat()
    report = tmp_path / "demo" / "lake" / "reports" / f"strata-report-{start - dt.timedelta(days=6)}-to-{last}.html"
    assert report.is_file() and f"file://{report}" in joined and "strata report --out" in out
    assert (tmp_path / "demo" / "secrets" / "pseudonym.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "demo" / "airflow" / "airflow.db").exists()  # Airflow's metadata, in the demo's corner
    assert not (tmp_path / "lake").exists()  # the demo keeps to its own corner
    assert "demo env)" in joined and "strata demo --reset" in out
    key = (tmp_path / "demo" / "secrets" / "pseudonym.key").read_text().strip()
    assert key not in out
    # Among the next commands, a mart row and the day's slowest workflow opened down to their lines: each runs.
    settings = load_settings({"STRATA_HOME": str(tmp_path / "demo"), "STRATA_PSEUDONYM_KEY": key})
    last = Lake(settings).read_frame(table("ads.model_daily")).get_column("event_date").max()
    assert isinstance(last, dt.date)
    opens = open_commands(Lake(settings), last)
    assert [shlex.split(c)[1] for c in opens] == ["explain", "trace"]
    for command in opens:
        assert command in joined
        done = CliRunner().invoke(app, shlex.split(command)[1:], env={"COLUMNS": "80", **settings.to_env()})
        assert done.exit_code == 0, done.output
        _, verb, *args = shlex.split(command)
        assert ("DWD rows it summarises" if verb == "explain" else f"trace {args[0]}: ") in done.output

    # The runs a scheduler started now makes next on the demo's lake (`strata airflow up`), by each
    # DAG's timetable: the latest complete interval of each, and the daily run of today, which holds
    # no data. None fails, and every ODS row is still there (retention counts back from today).
    ods = ("ods.request_log_raw", "ods.feedback_raw")
    rows = {name: Lake(settings).read(table(name)).num_rows for name in ods}
    plan = [Run(dag) for dag in ("strata_ingest", "strata_retention", "strata_train", "strata_daily")]
    reports = run_dags(settings, [*plan, Run("strata_daily", later=1)], log=settings.airflow_home / "scheduled.log")
    assert [r.ok for r in reports] == [True] * 5, [(r.dag_id, r.interval, r.errors) for r in reports]
    assert {name: Lake(settings).read(table(name)).num_rows for name in ods} == rows and all(rows.values())
    train = [dt.datetime.fromisoformat(moment) for moment in reports[2].interval]  # as docs/airflow.md says
    assert train[0].weekday() == 3 and train[1] - train[0] == dt.timedelta(weeks=1) and train[0].hour == 0
    empty = reports[-1]
    assert empty.interval[0][:10] == str(today) and empty.tasks["dwd.build_dwd"] == "skipped"
    assert empty.tasks["ads.build_ads"] == "skipped"  # (DWS builds: the demo's requests leave its windows)
    # The CLI refuses a date without data, as an error, for DWS as for DWD (it published empty partitions).
    before = start - dt.timedelta(days=1)
    dws = CliRunner().invoke(app, ["build", "dws", "--date", str(before)], env={"COLUMNS": "200", **settings.to_env()})
    assert isinstance(dws.exception, NoData) and dws.exit_code != 0
    window = f"no dwd.request rows from {before - dt.timedelta(days=8)} to {before}"
    assert window in " ".join(str(dws.exception).split())


def test_the_demo_keeps_its_dates_and_starts_its_corner_afresh_when_its_parameters_change(tmp_path: Path) -> None:
    said: list[str] = []
    settings = load_settings({"STRATA_HOME": str(tmp_path)})
    today = dt.date(2026, 12, 2)
    corner, start = demo_settings(settings, {"days": 1, "seed": 7}, said.append, today=today)
    assert corner.home == tmp_path / "demo" and corner.airflow_home == tmp_path / "demo" / "airflow"
    assert start == dt.date(2026, 11, 28)  # its late reviews end yesterday
    (corner.home / "lake").mkdir()
    # A re-run, days later, keeps the dates (the same bytes) and the lake.
    assert demo_settings(settings, {"days": 1, "seed": 7}, said.append, today=today + dt.timedelta(days=9))[1] == start
    assert (corner.home / "lake").exists() and said == []
    demo_settings(settings, {"days": 1, "seed": 99}, said.append, today=today)
    assert not (corner.home / "lake").exists() and "afresh" in said[0]
    # A demo older than the raw-data retention starts afresh on recent dates.
    later = today + dt.timedelta(days=settings.ods_retention_days + 10)
    assert demo_settings(settings, {"days": 1, "seed": 99}, said.append, today=later)[1] == later - dt.timedelta(days=4)
    assert "retention" in said[-1]
    # `strata demo env`: one line to eval, the key read from its file, never printed.
    (corner.home / "secrets").mkdir()
    (corner.home / "secrets" / "pseudonym.key").write_text("k-secret")
    line = env_line(settings)
    assert line.startswith(f"export STRATA_HOME={corner.home} ") and "$(cat " in line and "k-secret" not in line
    assert f"PATH={Path(sys.executable).parent}:" in line
    # With the demo's STRATA_HOME (after eval): the same corner, never a demo inside it.
    inside = load_settings({"STRATA_HOME": str(corner.home)})
    assert env_line(inside) == line
    assert demo_settings(inside, {"days": 1, "seed": 99}, said.append, today=later)[0].home == corner.home
    assert reset(settings) == corner.home and not corner.home.exists()
