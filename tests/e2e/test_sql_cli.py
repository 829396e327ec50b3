"""`strata sql` and `strata quotas load` as an analyst runs them: formats, refusals, --as-of, the prompt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

STRATA = [sys.executable, "-m", "strata.cli"]
PRICES = "model,effective_from,input_price_per_1k,output_price_per_1k\nm,2026-01-01,{price},0.002\n"


def _run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        STRATA + list(args),
        env={**os.environ, "COLUMNS": "200", **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from warehouse.dwd.prices import load_prices
    from warehouse.settings import load_settings

    root = tmp_path_factory.mktemp("sqlcli")
    env = {"STRATA_HOME": str(root / "home"), "STRATA_PSEUDONYM_KEY": "test-key-not-a-secret-0123456789"}
    prices = root / "prices.csv"
    for price in ("0.001", "0.005"):  # two versions of dwd.model_price
        prices.write_text(PRICES.format(price=price))
        load_prices(load_settings(env), prices)
    quotas = root / "quotas.csv"
    quotas.write_text(
        "tenant_id,effective_from,daily_request_quota,daily_token_quota\nt1,2026-01-01,100,5000\nt2,2026-01-01,,\n"
    )
    loaded = _run(env, "quotas", "load", str(quotas))
    assert loaded.returncode == 0 and "dwd.tenant_quota is now version 0" in loaded.stdout, loaded.stderr
    return env


def test_csv_to_stdout_and_parquet_to_a_file(env: dict[str, str], tmp_path: Path) -> None:
    query = "select tenant_id, daily_request_quota from dwd.tenant_quota order by tenant_id"
    csv = _run(env, "sql", query, "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout == "tenant_id,daily_request_quota\nt1,100\nt2,\n"
    out = tmp_path / "q.parquet"
    written = _run(env, "sql", query, "--format", "parquet", "--out", str(out))
    assert written.returncode == 0 and "wrote 2 row(s)" in written.stderr
    assert pq.read_table(out).to_pylist() == [
        {"tenant_id": "t1", "daily_request_quota": 100},
        {"tenant_id": "t2", "daily_request_quota": None},
    ]


def test_refusals_and_errors_are_one_clear_line(env: dict[str, str]) -> None:
    lake = Path(env["STRATA_HOME"]) / "lake" / "dwd" / "model_price"
    refused = _run(env, "sql", f"copy (select 1) to '{lake}/x.csv'")
    assert refused.returncode == 1 and "COPY statements are refused" in refused.stderr
    assert not (lake / "x.csv").exists()
    parse = _run(env, "sql", "select * frm dwd.tenant_quota")
    assert parse.returncode == 1 and "LINE 1:" in parse.stderr and "^" in parse.stderr
    assert "Traceback" not in parse.stderr + refused.stderr


def test_as_of_reads_an_older_version(env: dict[str, str]) -> None:
    query = "select input_price_per_1k as price from dwd.model_price"
    old = _run(env, "sql", query, "-f", "csv", "--as-of", "dwd.model_price=0")
    assert old.returncode == 0 and old.stdout == "price\n0.001\n"
    assert "dwd.model_price as of version 0" in old.stderr


def test_the_prompt_runs_statements_and_keeps_history(env: dict[str, str]) -> None:
    session = (
        ".help\n.nope\nselect 6 * 7 as answer;\nselect\n  count(*) as quotas\nfrom dwd.tenant_quota;\ndelete from "
        "dwd.tenant_quota;\n.tables\n.quit\n"
    )
    result = _run(env, "sql", stdin=session)
    assert result.returncode == 0, result.stderr
    assert "42" in result.stdout and "dwd.tenant_quota" in result.stdout and "1 row(s)" in result.stdout
    assert "DELETE statements are refused" in result.stderr  # an error does not end the session
    # .help answers, an unknown dot command is one error line: neither opens a statement
    assert result.stderr.count("End a statement with ';'") == 2 and "unknown command .nope" in result.stderr
    history = (Path(env["STRATA_HOME"]) / "sql_history").read_text().splitlines()
    assert history[-3:] == [
        "select 6 * 7 as answer;",
        "select count(*) as quotas from dwd.tenant_quota;",
        "delete from dwd.tenant_quota;",
    ]


def test_a_row_wider_than_the_terminal_prints_vertically(env: dict[str, str]) -> None:
    wide = "select repeat('x', 40) as first, repeat('y', 40) as second, 42 as answer, null as nothing"
    narrow = _run({**env, "COLUMNS": "80"}, "sql", wide)
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in narrow.stdout  # was a table of "…" cells
    assert lines[0].startswith("row 1 ──")
    assert [line.split() for line in lines[1:5]] == [
        ["first", "x" * 40],
        ["second", "y" * 40],
        ["answer", "42"],
        ["nothing", "NULL"],
    ]
    assert lines[5] == "1 row(s)"
    forced = _run({**env, "COLUMNS": "80"}, "sql", "select 6 * 7 as answer", "-x")
    assert forced.stdout.splitlines()[1].split() == ["answer", "42"]
    # the prompt: .vertical and \\x toggle it; off, a row that fits is a table
    session = _run(
        {**env, "COLUMNS": "80"}, "sql", stdin=".vertical\nselect 6 * 7 as answer;\n\\x\nselect 7 as seven;\n"
    )
    assert session.returncode == 0 and "vertical on" in session.stderr and "vertical off" in session.stderr
    assert "row 1 ──" in session.stdout.split("answer")[0] and "┃ seven ┃" in session.stdout


def test_the_dot_commands_run_as_the_one_query_and_a_table_rounds_its_floats(env: dict[str, str]) -> None:
    """The hint "(.tables lists them)" is given to a one-shot query too, where `strata sql ".tables"` was a
    parser error; the table view printed raw doubles (`2667.8708927480407`), a file keeps every digit."""
    from typer.testing import CliRunner

    from strata.cli import app
    from tests.terminal import run_on_terminal

    query = "select 2667.8708927480407::double as latency_ms, 1.19e-07::double as tiny, 2026 as year, 0.1::float as f"
    shown = run_on_terminal(["sql", query], env)  # as a person runs it, at 80 columns
    assert shown.returncode == 0 and "2667.8708927480407" not in shown.text, shown.text
    row = next(line for line in shown.lines if "2667" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["2667.87", "0.000000119", "2026", "0.1"]
    runner = CliRunner()
    tables = runner.invoke(app, ["sql", ".tables"], env={**env, "COLUMNS": "80"})
    assert tables.exit_code == 0, tables.output
    assert [line.split()[1:4] for line in tables.stdout.splitlines() if "tenant_quota" in line] == [
        ["dwd.tenant_quota", "│", "0"]
    ]
    csv = runner.invoke(app, ["sql", query, "-f", "csv"], env=env)
    assert csv.exit_code == 0 and csv.stdout.splitlines()[1].startswith("2667.8708927480407,1.19e-7,2026,")
    schema = runner.invoke(app, ["sql", ".schema dwd.tenant_quota", "-f", "csv"], env=env)
    assert schema.exit_code == 0 and "\ndaily_request_quota,BIGINT," in schema.stdout, schema.output
    for command, said in [
        (".schema nope.table", "'nope.table' is not a table of the lake (.tables lists them)"),
        (".vertical", ".vertical is a command of the prompt (strata sql without a query); here: --vertical (-x)"),
        (".nope", "unknown command .nope (.help, .tables, .schema TABLE, .vertical, .quit)"),
    ]:
        refused = runner.invoke(app, ["sql", command], env=env)
        assert refused.exit_code != 0 and str(refused.exception) == said


def test_out_writes_aside_and_never_into_strata_home(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "q.csv"
    out.write_text("kept\n")
    failing = "select case when i > 300000 then error('boom') end as x from range(400000) t(i)"  # after a batch
    failed = _run(env, "sql", failing, "-f", "csv", "--out", str(out))
    assert failed.returncode == 1 and "error:" in failed.stderr  # DuckDB says boom, or Interrupted (a race)
    assert out.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == ["q.csv"]  # nothing half-written
    log = Path(env["STRATA_HOME"]) / "lake" / "dwd" / "tenant_quota" / "_delta_log"
    commit = log / "00000000000000000001.json"  # a crafted result as the next commit emptied dwd.request
    refused = _run(env, "sql", "select 1 as x", "-f", "json", "--out", str(commit))
    assert refused.returncode == 2 and "inside STRATA_HOME" in refused.stderr, refused.stderr
    assert sorted(p.name for p in log.iterdir()) == ["00000000000000000000.json"]


def test_dead_sessions_scratch_is_cleared_at_the_next_start(env: dict[str, str]) -> None:
    tmp = Path(env["STRATA_HOME"]) / "tmp"
    dead, live = tmp / "999999999" / "sql-0badc0de", tmp / str(os.getpid()) / "sql-0000live"  # no pid is that high
    dead.mkdir(parents=True)
    live.mkdir(parents=True)
    assert _run(env, "sql", "select 1").returncode == 0
    assert not dead.parent.exists() and live.is_dir()
    live.rmdir()


def _cpu_s(pid: int) -> float:
    """Seconds of CPU a process has used (Linux): how a test sees a query running."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ctrl_c_cancels_the_query_not_the_prompt(env: dict[str, str]) -> None:
    prompt = subprocess.Popen(
        [*STRATA, "sql"],
        env={**os.environ, **env, "STRATA_SQL_TIMEOUT_S": "60"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert prompt.stderr is not None and prompt.stdin is not None and prompt.stdout is not None
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(iter(prompt.stderr.readline, "")), daemon=True).start()

    def wait(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    try:
        wait(lambda: any("strata sql:" in line for line in errors))  # the session is open, the prompt waits
        idle = _cpu_s(prompt.pid)
        prompt.stdin.write("select count(*) from range(10_000_000_000);\n")
        prompt.stdin.flush()
        wait(lambda: _cpu_s(prompt.pid) > idle + 0.5)  # the query runs (a Ctrl-C at the prompt clears the line)
        started = time.monotonic()
        prompt.send_signal(signal.SIGINT)
        wait(lambda: any("error: cancelled" in line for line in errors))
        cancelled_in = time.monotonic() - started
        prompt.stdin.write("select 6 * 7 as answer;\n.quit\n")
        prompt.stdin.close()
        stdout = prompt.stdout.read()
        prompt.wait(60)
    finally:
        prompt.kill()
    assert cancelled_in < 10, "".join(errors)  # not the 60 s timeout
    assert prompt.returncode == 0 and "42" in stdout, "".join(errors)
