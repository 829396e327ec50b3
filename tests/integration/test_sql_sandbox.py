"""strata sql's sandbox: reads of the lake's tables only, refused otherwise by DuckDB's own means."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import time
from pathlib import Path

import duckdb
import pytest

from contracts.errors import InputError
from warehouse.dwd.prices import load_prices
from warehouse.dwd.quotas import load_quotas
from warehouse.ods.ingest import ingest
from warehouse.settings import Settings, load_settings
from warehouse.sql.guard import DENIED_FUNCTIONS, HARMLESS_SIDE_EFFECTS, TABLE_FUNCTIONS, check, denied_functions
from warehouse.sql.sandbox import QueryCancelled, QueryFailed, QueryRefused, Session, parse_as_of
from warehouse.tables import DWD_MODEL_PRICE, ODS_REQUESTS, all_tables, table

PRICES = "model,effective_from,input_price_per_1k,output_price_per_1k\nm,2026-01-01,{price},0.002\n"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path, dt.datetime]:
    """A small lake: ODS lines holding a prompt, two versions of the price list, quotas."""
    root = tmp_path_factory.mktemp("sandbox")
    settings = load_settings({"STRATA_HOME": str(root / "home"), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    logs = root / "logs.jsonl"
    logs.write_text(
        "".join(
            json.dumps(
                {
                    "request_id": f"r{i}",
                    "ts": "2026-02-01T12:00:00Z",
                    "tenant_id": "t",
                    "user_id": "alice",
                    "operation": "chat",
                    "model": "m",
                    "status_code": 200,
                    "prompt": "my card number is 4111 1111 1111 1111",
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    ingest(settings, [logs])
    prices = root / "prices.csv"
    prices.write_text(PRICES.format(price="0.001"))
    load_prices(settings, prices)
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    prices.write_text(PRICES.format(price="0.005"))
    load_prices(settings, prices)
    quotas = root / "quotas.csv"
    quotas.write_text("tenant_id,effective_from,daily_request_quota,daily_token_quota\nt,2026-01-01,10,\n")
    load_quotas(settings, quotas)
    outside = root / "outside.csv"
    outside.write_text("secret\n42\n")
    return settings, outside, between


@pytest.fixture(scope="module")
def session(lake: tuple[Settings, Path, dt.datetime]) -> Session:
    """One session for the tests that only read or are refused (a session opens in ~1 s)."""
    with Session(lake[0]) as s:
        yield s


def test_tables_are_views_of_their_current_delta_versions(session: Session) -> None:
    names = {v.name: v.version for v in session.views}
    assert names["dwd.model_price"] == 1 and "dwd.tenant_quota" in names and "ops.audit_log" in names
    assert session.query("select input_price_per_1k from dwd.model_price").to_pylist() == [
        {"input_price_per_1k": 0.005}
    ]
    assert session.query("select count(*) as n from ops.audit_log").column("n")[0].as_py() >= 3


@pytest.mark.parametrize(
    "sql",
    [
        "create table dwd.copy as select * from dwd.model_price",
        "insert into dwd.model_price select * from dwd.model_price",
        "delete from dwd.model_price",
        "update dwd.model_price set input_price_per_1k = 0",
        "drop view dwd.model_price",
        "select 1; create table x (a int)",
    ],
)
def test_writing_is_refused(session: Session, sql: str) -> None:
    with pytest.raises(QueryRefused, match="refused: a session is read-only"):
        session.query(sql)
    assert session.query("select count(*) as n from dwd.model_price").column("n")[0].as_py() == 1


def test_copy_is_refused_even_into_the_lake(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    folder = Path(DWD_MODEL_PRICE.uri(lake[0]))
    before = sorted(p.name for p in folder.iterdir())
    for sql in (
        f"copy (select 1) to '{folder}/x.csv'",
        f"explain analyze copy (select 1) to '{folder}/y.csv'",
        f"export database '{folder}/db'",
    ):
        with pytest.raises(QueryRefused, match=r"(COPY|EXPORT) statements are refused"):
            session.query(sql)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert session.query("explain analyze select 1").num_rows == 1  # EXPLAIN of a read runs


def test_attach_install_load_and_set_are_refused(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    folder = Path(DWD_MODEL_PRICE.uri(lake[0]))
    for sql, kind in (
        (f"attach '{folder}/z.duckdb' as z", "ATTACH"),
        ("install httpfs", "LOAD"),
        ("load httpfs", "LOAD"),
        ("set enable_external_access = true", "SET"),
        ("pragma enable_profiling", "PRAGMA"),
    ):
        with pytest.raises(QueryRefused, match=f"{kind} statements are refused"):
            session.query(sql)
    assert not (folder / "z.duckdb").exists()
    # Beneath the statement check, DuckDB's own settings are locked.
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        session.con.execute("SET enable_external_access = true")


def test_reading_a_file_outside_the_lake_is_refused(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    _, outside, _ = lake
    for sql in (
        f"select * from read_csv('{outside}')",
        "select * from read_text('/etc/passwd')",
        f"select * from glob('{outside.parent}/*')",
    ):
        with pytest.raises(QueryRefused, match=r"table function .* is refused"):
            session.query(sql)
        # Beneath the check, DuckDB's own sandbox refuses the file too.
        with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
            session.con.execute(sql)
    with pytest.raises(QueryFailed, match="disabled by configuration"):
        session.query(f"import database '{outside.parent}'")  # parsing it reads files: the sandbox refuses


def test_raw_lines_need_raw(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, _ = lake
    ods = ODS_REQUESTS.uri(settings)
    with Session(settings) as session:
        assert not {"ods.request_log_raw", "ods.feedback_raw", "dwd.quarantine"} & {v.name for v in session.views}
        with pytest.raises(QueryRefused, match="delta_scan"):
            session.query(f"select * from delta_scan('{ods}')")
        with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
            session.con.execute(f"select * from delta_scan('{ods}')")  # the folder is not allowed either
        with pytest.raises(QueryRefused, match="only in a raw session"):
            session.query("select * from ods.request_log_raw")
    with Session(settings, raw=True) as session:
        lines = session.query("select raw_line from ods.request_log_raw").column("raw_line").to_pylist()
        assert len(lines) == 3 and all(b"4111" in line for line in lines)
        assert session.con.execute(f"select count(*) from delta_scan('{ods}')").fetchone() == (3,)
    with pytest.raises(QueryRefused, match="needs a raw session"):
        Session(settings, as_of={ODS_REQUESTS: 0})


def test_as_of_reads_an_older_version(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, between = lake
    for when in ("0", between.isoformat()):
        pinned = dict([parse_as_of(f"dwd.model_price={when}")])
        with Session(settings, as_of=pinned) as session:
            view = next(v for v in session.views if v.name == "dwd.model_price")
            assert view.pinned and view.version == 0
            assert session.query("select input_price_per_1k as p from dwd.model_price").column("p").to_pylist() == [
                0.001
            ]
    with pytest.raises(InputError, match="versions 0 to 1, not 7"):
        Session(settings, as_of={DWD_MODEL_PRICE: 7})
    with pytest.raises(InputError, match="did not exist at 2000-01-01"):
        Session(settings, as_of=dict([parse_as_of("dwd.model_price=2000-01-01")]))
    with pytest.raises(InputError, match=r"ads\.model_daily does not exist in the lake"):
        Session(settings, as_of={table("ads.model_daily"): 0})
    with pytest.raises(InputError, match="TABLE=VERSION"):
        parse_as_of("dwd.model_price")


def test_errors_carry_duckdbs_message_and_position(session: Session) -> None:
    """A statement DuckDB cannot run as written is the user's error (an InputError), with DuckDB's words."""
    with pytest.raises(QueryFailed) as parse:
        session.query("select * frm dwd.model_price")
    assert "LINE 1:" in str(parse.value) and "^" in str(parse.value)
    assert isinstance(parse.value.__cause__, duckdb.ParserException)
    with pytest.raises(QueryFailed, match='column "nope" not found'):
        session.query("select nope from dwd.model_price")
    with pytest.raises(QueryFailed, match="Could not convert"):
        session.query("select cast('x' as integer) as n")


def test_a_session_leaves_nothing_behind(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, _ = lake
    with Session(settings) as session:
        session.query("select * from dwd.model_price order by all")
        scratch = session.scratch
        assert scratch.is_dir() and scratch.is_relative_to(settings.home)
    assert not scratch.exists()


def test_every_table_function_off_the_allow_list_is_refused(
    session: Session, lake: tuple[Settings, Path, dt.datetime]
) -> None:
    """Each of DuckDB's own table functions, table macros and pragmas, as this session has them."""
    names = {
        name
        for (name,) in session.con.execute(
            "select distinct function_name from duckdb_functions() "
            "where function_type in ('table', 'table_macro', 'pragma')"
        ).fetchall()
    }
    assert {"enable_logging", "query", "read_text", "duckdb_secrets", "checkpoint"} <= names  # the catalog is real
    for name in sorted(names - TABLE_FUNCTIONS):
        with pytest.raises(QueryRefused, match=rf"table function {name}\(\) is refused"):
            session.query(f'select * from "{name}"()')
        with pytest.raises(QueryRefused):
            session.query(f'select 1 from dwd.model_price, (from (select 1) join lateral "{name}"() on true)')
    pragmas = {
        name
        for (name,) in session.con.execute(
            "select distinct function_name from duckdb_functions() where function_type = 'pragma'"
        ).fetchall()
    }
    not_run = (QueryRefused, QueryFailed)
    for name in sorted(pragmas):  # the statements that call them: refused, or not even bound while parsed
        for sql in (f'pragma "{name}"', f'call "{name}"()'):
            with pytest.raises(not_run):
                session.query(sql)
    assert session.query("select count(*) as n from range(3), generate_series(1, 3)").column("n")[0].as_py() == 9


def test_a_select_cannot_write_into_the_lake(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    log = Path(table("ops.audit_log").uri(lake[0])) / "_delta_log"
    before = sorted(p.name for p in log.iterdir())
    nxt = f"{log}/{int(max(before)[:20]) + 1:020d}.json"
    for sql in (
        f"select * from enable_logging(storage='file', storage_path='{nxt}')",
        "select * from enable_logging(storage_config={'normalize': false})",  # aborted the process
        f"select write_blob('{nxt}', 'x'::blob)",
        f"select [1].list_transform(x -> main.write_blob('{nxt}', 'x'::blob))",
        f"select * from dwd.model_price where \"WRITE_BLOB\"('{nxt}', ''::blob)",
    ):
        with pytest.raises(QueryRefused, match="is refused"):
            session.query(sql)
    assert sorted(p.name for p in log.iterdir()) == before


def test_functions_with_side_effects_or_outside_access_are_refused(session: Session) -> None:
    marked = {
        name
        for (name,) in session.con.execute(
            "select distinct function_name from duckdb_functions() where has_side_effects"
        ).fetchall()
    }
    assert {"write_log", "nextval", "sleep_ms"} <= marked
    for name in sorted(marked - HARMLESS_SIDE_EFFECTS | DENIED_FUNCTIONS):
        with pytest.raises(QueryRefused, match=rf"{name}\(\) is refused"):
            session.query(f"select {name}()")
    assert session.query("select now() is not null as ok, random() < 1 as r").to_pylist() == [{"ok": True, "r": True}]


def test_every_macro_allowed_calls_only_allowed_functions(session: Session) -> None:
    """A macro's body is not in the statement's tree: one that reaches a refused function is denied by name."""
    macros = session.con.execute(
        "select function_name, macro_definition from duckdb_functions() where function_type = 'macro'"
    ).fetchall()
    denied = denied_functions(session.con)
    allowed = [(name, definition) for name, definition in macros if name not in denied]
    for _, definition in allowed:
        check(session.con, f"select {definition}", [], denied)
    assert {"list_sum", "split_part", "nullif"} <= {name for name, _ in allowed}  # the macros were found and checked


#: Functions whose names look like I/O that were read and found pure (DuckDB 1.5).
_REVIEWED = {
    "current_query",
    "current_query_id",
    "has_table_privilege",
    "has_tablespace_privilege",
    "parse_delta_filter_logline",
    "parse_filename",
    "pg_conf_load_time",
    "pg_table_is_visible",
    "regexp_split_to_table",
}


def test_a_function_whose_name_suggests_io_is_denied_or_reviewed(session: Session) -> None:
    """A tripwire for DuckDB upgrades: ``write_blob`` carried no side-effect mark."""
    looks_like_io = {
        name
        for (name,) in session.con.execute(
            "select distinct function_name from duckdb_functions() "
            "where function_type in ('scalar', 'aggregate', 'macro') "
            "and regexp_matches(function_name, 'write|file|read|exec|sql|setting|secret|env|sleep|variable|http|"
            "checkpoint|attach|copy|export|import|install|load|extension|logging|_log|system|shell|plan|query|table|blob')"
        ).fetchall()
    }
    assert "write_blob" in looks_like_io
    assert looks_like_io - denied_functions(session.con) - _REVIEWED == set()


def test_files_tables_and_strings_as_tables_are_refused(session: Session) -> None:
    for sql in (
        "from 'outside.csv'",
        'select * from "/etc/passwd"',
        "show '/etc/passwd'",
        "describe '/etc/passwd'",
        "summarize '/etc/passwd'",
        "select * from memory.main.duckdb_settings",
        "select * from system.main.x",
        "select * from (with \"/etc/passwd\" as (select 1) select 1), '/etc/passwd'",  # a CTE out of scope
        "with a as (select * from b), b as (select 1) select * from a",
        "select (select count(*) from 'x.parquet')",
        "explain select * from 'x.csv'",
        "pragma table_info('dwd.model_price')",
        "select 1 from dwd.model_price where exists (from query('select 1'))",
        "select " + " + ".join(["1"] * 900),
    ):  # deeper than the check walks
        with pytest.raises(QueryRefused, match=r"not a table of the lake|is refused|cannot be checked"):
            session.query(sql)


def test_what_an_analyst_runs_passes(session: Session) -> None:
    assert session.query("show tables").num_rows == 0  # the views are not in DuckDB's main schema
    for sql in (
        "describe dwd.model_price",
        "show all tables",
        "summarize dwd.model_price",
        "values (1), (2)",
        "select * from unnest([1, 2])",
        "select unnest([1, 2]) as x",
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select * from r",
        "with p as materialized (from dwd.model_price) select count(*) from p",
        "pivot dwd.model_price on model in ('m') using max(input_price_per_1k)",
        "explain select * from DWD.Model_Price",
        "select current_date - 7 as d",
        "from memory.dwd.model_price select model",
    ):
        assert session.query(sql).num_rows >= 1, sql


def test_the_documented_analyst_queries_pass_the_check(session: Session) -> None:
    """The analyst's first questions (docs/ads.md) and the README's first hour's ``strata sql "…"`` lines."""
    repo = Path(__file__).parents[2]
    page = (repo / "docs" / "ads.md").read_text()
    block = page.split("## SQL for analysts", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    views = [(t.layer, t.name.split(".", 1)[1]) for t in all_tables()]
    queries = [q for q in block.split(";") if q.strip()]
    # (not its dot-commands, such as ".tables": they are the shell's, not SQL, and test_sql_cli runs them)
    first_hour = re.findall(r'^strata sql "([^".][^"]*)"', (repo / "README.md").read_text(), re.MULTILINE)
    assert len(queries) >= 4 and len(first_hour) >= 2
    queries += first_hour
    for sql in queries:
        check(session.con, sql, views, denied_functions(session.con))


def test_a_statement_is_bounded_in_time_and_memory(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings = dataclasses.replace(lake[0], sql_timeout_s=0.5, sql_memory_limit="1GB", sql_spill_limit="3GB")
    with Session(settings) as session:
        assert session.con.execute(
            "select current_setting('memory_limit'), current_setting('max_temp_directory_size')"
        ).fetchone() == ("953.6 MiB", "2.7 GiB")
        for sql in (
            "select count(*) from range(10_000_000_000)",  # interrupted while DuckDB computes
            "select * from range(10_000_000_000)",
        ):  # interrupted while the result streams
            started = time.monotonic()
            with pytest.raises(QueryCancelled, match=r"ran past 0.5 s and was cancelled \(STRATA_SQL_TIMEOUT_S"):
                for reader in session.execute(sql):
                    for _ in reader:
                        pass
            assert time.monotonic() - started < 5
        assert session.query("select 42 as answer").to_pylist() == [{"answer": 42}]  # the session goes on


def test_as_of_takes_ascii_digits_only() -> None:
    with pytest.raises(InputError, match="neither a version number nor an ISO 8601 time"):
        parse_as_of("dwd.request=²")
