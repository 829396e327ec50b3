"""How the lake is opened and read within one process: a handle opens a Delta table once and keeps
it up to date, DuckDB's lake reader is one instance per lake. Real Delta tables, real DuckDB."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from contracts import conform
from tests.contract_rows import synthetic
from warehouse.settings import Settings, load_settings
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.tables import OPS_BOOKS


@pytest.fixture
def settings(strata_env: Path) -> Settings:
    return load_settings()


def _rows(n: int) -> pa.Table:
    return conform(synthetic(OPS_BOOKS.contract, n), OPS_BOOKS.contract, check_values=False)  # keys repeat


def _commit(lake: Lake, data: pa.Table) -> int:
    return lake.commit(OPS_BOOKS, data, mode="append", partition_by=OPS_BOOKS.contract.partition_columns)


def test_a_table_opened_again_sees_every_commit_since_and_is_the_same_handle(settings: Settings) -> None:
    lake, writer = Lake(settings), Lake(settings)  # the writer: another step, or another process
    assert lake.open_table(OPS_BOOKS) is None
    _commit(writer, _rows(2))
    first = lake.open_table(OPS_BOOKS)
    assert first is not None and first.version() == 0
    _commit(writer, _rows(3))
    again = lake.open_table(OPS_BOOKS)
    assert again is first and again.version() == 1
    assert lake.read(OPS_BOOKS).num_rows == 5


def test_a_table_removed_or_made_again_elsewhere_is_opened_afresh(settings: Settings) -> None:
    lake = Lake(settings)
    for _ in range(3):
        _commit(lake, _rows(1))
    assert lake.open_table(OPS_BOOKS).version() == 2  # type: ignore[union-attr]
    location = Path(OPS_BOOKS.uri(settings))

    shutil.rmtree(location)
    assert lake.open_table(OPS_BOOKS) is None  # gone: not the handle of the table that was
    for _ in range(3):
        _commit(lake, _rows(1))
    assert lake.open_table(OPS_BOOKS).version() == 2  # type: ignore[union-attr]

    shutil.rmtree(location)  # made again elsewhere, up to the same version, with other rows
    elsewhere = Lake(settings)
    for n in (4, 1, 1):
        _commit(elsewhere, _rows(n))
    assert lake.open_table(OPS_BOOKS).version() == 2  # type: ignore[union-attr]
    assert lake.read(OPS_BOOKS).num_rows == 6


def test_lake_readers_share_an_instance_but_not_what_a_caller_registers(settings: Settings) -> None:
    _commit(Lake(settings), _rows(3))
    one, two = lake_reader(settings), lake_reader(settings, ordered=False)
    one.register("wanted", pa.table({"k": [1]}))
    with pytest.raises(Exception, match="wanted"):
        two.execute("SELECT * FROM wanted").fetchall()
    query = f"SELECT count(*) FROM delta_scan('{OPS_BOOKS.uri(settings)}')"
    assert one.execute(query).fetchone() == two.execute(query).fetchone() == (3,)
    assert one.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
    assert two.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (False,)
    assert one.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)
    # one instance: the delta extension was loaded once, for both
    assert one.execute(
        "SELECT count(*) FROM duckdb_extensions() WHERE loaded AND extension_name = 'delta'"
    ).fetchone() == (1,)


def test_a_process_that_reads_a_table_and_exits_at_once_exits_cleanly(settings: Settings) -> None:
    """pyarrow reads the lake through its own filesystem: with deltalake's default one, written in
    Python, pyarrow's I/O threads were still calling into Python as the interpreter exited, and 31
    of 40 such processes aborted ("terminate called without an active exception", exit -6)."""
    for _ in range(4):  # several files: several I/O threads
        _commit(Lake(settings), _rows(50))
    script = "from warehouse.settings import load_settings; from warehouse.storage.lake import Lake; "
    script += "from warehouse.tables import OPS_BOOKS; print(Lake(load_settings()).read(OPS_BOOKS).num_rows)"
    for _ in range(6):  # with the old filesystem, all six pass 1 time in ~5,000
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr, done.stdout.strip()) == (0, "", "200")
