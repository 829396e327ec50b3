"""The report's lineage counts a table's rows from its Delta log, and through DuckDB where the log has no count."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from strata.report.view import LakeView
from warehouse.settings import load_settings
from warehouse.tables import Table

DAY = dt.date(2026, 3, 2)


def test_rows_come_from_the_log_and_from_duckdb_where_a_file_has_no_count(strata_env: Path) -> None:
    settings = load_settings()
    uri = Table("ops.books").uri(settings)
    write_deltalake(uri, pa.table({"n": [1, 2, 3]}))
    write_deltalake(uri, pa.table({"n": [4, 5]}), mode="append")
    DeltaTable(uri).delete("n = 1")  # a rewrite: the log's counts are those of the files there are now
    assert LakeView.open(settings, DAY, DAY).rows("ops.books") == 4
    # A writer that keeps no statistics: its add actions carry no row count.
    for commit in sorted((Path(uri) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            action.get("add", {}).pop("stats", None)
        commit.write_text("".join(json.dumps(action) + "\n" for action in actions))
    view = LakeView.open(settings, DAY, DAY)
    assert view.rows("ops.books") == 4 and view.rows("ops.landed_files") == 0  # (one never written)
