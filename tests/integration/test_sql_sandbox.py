"""strata sql's sandbox: reads of the lake's tables only, refused otherwise by DuckDB's own means."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import duckdb
import pytest

from warehouse.dwd.prices import load_prices
from warehouse.dwd.quotas import load_quotas
from warehouse.ods.ingest import ingest
from warehouse.settings import Settings, load_settings
from warehouse.sql.sandbox import QueryRefused, Session, parse_as_of
from warehouse.tables import DWD_MODEL_PRICE, ODS_REQUESTS, table

PRICES = "model,effective_from,input_price_per_1k,output_price_per_1k\nm,2026-01-01,{price},0.002\n"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path, dt.datetime]:
    """A small lake: ODS lines holding a prompt, two versions of the price list, quotas."""
    root = tmp_path_factory.mktemp("sandbox")
    settings = load_settings({"STRATA_HOME": str(root / "home"), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    logs = root / "logs.jsonl"
    logs.write_text("".join(json.dumps({
        "request_id": f"r{i}", "ts": "2026-02-01T12:00:00Z", "tenant_id": "t", "user_id": "alice", "operation": "chat",
        "model": "m", "status_code": 200, "prompt": "my card number is 4111 1111 1111 1111"}) + "\n" for i in range(3)))
    ingest(settings, [logs])
    prices = root / "prices.csv"
    prices.write_text(PRICES.format(price="0.001"))
    load_prices(settings, prices)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    prices.write_text(PRICES.format(price="0.005"))
    load_prices(settings, prices)
    quotas = root / "quotas.csv"
    quotas.write_text("tenant_id,effective_from,daily_request_quota,daily_token_quota\nt,2026-01-01,10,\n")
    load_quotas(settings, quotas)
    outside = root / "outside.csv"
    outside.write_text("secret\n42\n")
    return settings, outside, between


@pytest.fixture
def session(lake: tuple[Settings, Path, dt.datetime]) -> Session:
    with Session(lake[0]) as s:
        yield s


def test_tables_are_views_of_their_current_delta_versions(session: Session) -> None:
    names = {v.name: v.version for v in session.views}
    assert names["dwd.model_price"] == 1 and "dwd.tenant_quota" in names and "ops.audit_log" in names
    assert session.query("select input_price_per_1k from dwd.model_price").to_pylist() == [
        {"input_price_per_1k": 0.005}]
    assert session.query("select count(*) as n from ops.audit_log").column("n")[0].as_py() >= 3


@pytest.mark.parametrize("sql", [
    "create table dwd.copy as select * from dwd.model_price",
    "insert into dwd.model_price select * from dwd.model_price",
    "delete from dwd.model_price",
    "update dwd.model_price set input_price_per_1k = 0",
    "drop view dwd.model_price",
    "select 1; create table x (a int)",
])
def test_writing_is_refused(session: Session, sql: str) -> None:
    with pytest.raises(QueryRefused, match="refused: strata sql is read-only"):
        session.query(sql)
    assert session.query("select count(*) as n from dwd.model_price").column("n")[0].as_py() == 1


def test_copy_is_refused_even_into_the_lake(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    folder = Path(DWD_MODEL_PRICE.uri(lake[0]))
    before = sorted(p.name for p in folder.iterdir())
    for sql in (f"copy (select 1) to '{folder}/x.csv'",
                f"explain analyze copy (select 1) to '{folder}/y.csv'",
                f"export database '{folder}/db'"):
        with pytest.raises(QueryRefused, match=r"(COPY|EXPORT) statements are refused"):
            session.query(sql)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert session.query("explain analyze select 1").num_rows == 1  # EXPLAIN of a read runs


def test_attach_install_load_and_set_are_refused(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    folder = Path(DWD_MODEL_PRICE.uri(lake[0]))
    for sql, kind in ((f"attach '{folder}/z.duckdb' as z", "ATTACH"), ("install httpfs", "LOAD"),
                      ("load httpfs", "LOAD"), ("set enable_external_access = true", "SET"),
                      ("pragma enable_profiling", "PRAGMA")):
        with pytest.raises(QueryRefused, match=f"{kind} statements are refused"):
            session.query(sql)
    assert not (folder / "z.duckdb").exists()
    # Beneath the statement check, DuckDB's own settings are locked.
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        session.con.execute("SET enable_external_access = true")


def test_reading_a_file_outside_the_lake_is_refused(session: Session, lake: tuple[Settings, Path, dt.datetime]) -> None:
    _, outside, _ = lake
    for sql in (f"select * from read_csv('{outside}')", "select * from read_text('/etc/passwd')",
                f"select * from glob('{outside.parent}/*')", f"import database '{outside.parent}'"):
        with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
            session.query(sql)


def test_raw_lines_need_raw(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, _ = lake
    ods = ODS_REQUESTS.uri(settings)
    with Session(settings) as session:
        assert not {"ods.request_log_raw", "ods.feedback_raw", "dwd.quarantine"} & {v.name for v in session.views}
        with pytest.raises(duckdb.PermissionException, match="need --raw"):
            session.query(f"select * from delta_scan('{ods}')")
        with pytest.raises(duckdb.CatalogException, match="only with --raw"):
            session.query("select * from ods.request_log_raw")
    with Session(settings, raw=True) as session:
        lines = session.query("select raw_line from ods.request_log_raw").column("raw_line").to_pylist()
        assert len(lines) == 3 and all(b"4111" in line for line in lines)
        assert session.query(f"select count(*) as n from delta_scan('{ods}')").column("n")[0].as_py() == 3
    with pytest.raises(QueryRefused, match="needs --raw"):
        Session(settings, as_of={ODS_REQUESTS: 0})


def test_as_of_reads_an_older_version(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, between = lake
    for when in ("0", between.isoformat()):
        pinned = dict([parse_as_of(f"dwd.model_price={when}")])
        with Session(settings, as_of=pinned) as session:
            view = next(v for v in session.views if v.name == "dwd.model_price")
            assert view.pinned and view.version == 0
            assert session.query("select input_price_per_1k as p from dwd.model_price").column("p").to_pylist() == \
                [0.001]
    with pytest.raises(LookupError, match="versions 0 to 1, not 7"):
        Session(settings, as_of={DWD_MODEL_PRICE: 7})
    with pytest.raises(LookupError, match="did not exist at 2000-01-01"):
        Session(settings, as_of=dict([parse_as_of("dwd.model_price=2000-01-01")]))
    with pytest.raises(LookupError, match="ads.model_daily, which does not exist"):
        Session(settings, as_of={table("ads.model_daily"): 0})
    with pytest.raises(ValueError, match="TABLE=VERSION"):
        parse_as_of("dwd.model_price")


def test_errors_carry_duckdbs_message_and_position(session: Session) -> None:
    with pytest.raises(duckdb.ParserException) as parse:
        session.query("select * frm dwd.model_price")
    assert "LINE 1:" in str(parse.value) and "^" in str(parse.value)
    with pytest.raises(duckdb.BinderException, match='column "nope" not found'):
        session.query("select nope from dwd.model_price")


def test_a_session_leaves_nothing_behind(lake: tuple[Settings, Path, dt.datetime]) -> None:
    settings, _, _ = lake
    with Session(settings) as session:
        session.query("select * from dwd.model_price order by all")
        scratch = session.scratch
        assert scratch.is_dir() and scratch.is_relative_to(settings.home)
    assert not scratch.exists()
