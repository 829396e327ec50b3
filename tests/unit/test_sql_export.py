"""Writing query results: CSV flattens nested cells to JSON text, JSON is one object per line."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from contracts.errors import InputError
from warehouse.settings import load_settings
from warehouse.sql.export import target, write, write_file


def reader() -> pa.RecordBatchReader:
    batch = pa.record_batch(
        {
            "model": ["a", "b"],
            "versions": [["v1", "v2"], []],
            "cost": pa.array([Decimal("0.000000001"), None], pa.decimal128(18, 9)),
        }
    )
    return pa.RecordBatchReader.from_batches(batch.schema, [batch, batch.slice(0, 1)])


def test_csv_writes_one_header_and_nested_cells_as_json() -> None:
    out = io.BytesIO()
    assert write(reader(), "csv", out) == 3
    assert out.getvalue().decode().splitlines() == [
        "model,versions,cost",
        'a,"[""v1"", ""v2""]",0.000000001',
        "b,[],",
        'a,"[""v1"", ""v2""]",0.000000001',
    ]


def test_json_lines_and_an_empty_result() -> None:
    out = io.BytesIO()
    write(reader(), "json", out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows[0]["versions"] == ["v1", "v2"] and rows[1]["cost"] is None and len(rows) == 3
    empty = io.BytesIO()
    schema = pa.schema([("a", pa.int64())])
    assert write(pa.RecordBatchReader.from_batches(schema, []), "csv", empty) == 0
    assert empty.getvalue() == b"a\n"
    with pytest.raises(InputError, match="unknown format 'xml'"):
        write(reader(), "xml", io.BytesIO())


def test_a_result_file_goes_outside_strata_home_and_the_lake(tmp_path: Path) -> None:
    lake = tmp_path / "elsewhere" / "lake"
    (lake / "dwd" / "request" / "_delta_log").mkdir(parents=True)
    settings = load_settings(
        {
            "STRATA_HOME": str(tmp_path / "home"),
            "STRATA_LAKE_URI": str(lake),
            "STRATA_LANDING_DIR": str(tmp_path / "landing"),
        }
    )
    link = tmp_path / "commit.json"
    link.symlink_to(lake / "dwd" / "request" / "_delta_log" / "00000000000000000001.json")
    for path, where in (
        (lake / "dwd" / "request" / "_delta_log" / "00000000000000000001.json", "the lake"),
        (link, "the lake"),
        (tmp_path / "home" / "x.csv", "STRATA_HOME"),
        (tmp_path / "landing" / "x.jsonl", "the landing zone"),
    ):
        with pytest.raises(InputError, match=f"inside {where}"):
            target(path, settings)
    with pytest.raises(InputError, match="is not a folder"):
        target(tmp_path / "nope" / "x.csv", settings)
    assert target(tmp_path / "x.csv", settings) == tmp_path / "x.csv"


def test_a_failing_result_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield from reader()
        raise OSError("the query failed")

    out = tmp_path / "q.csv"
    out.write_text("kept\n")
    with pytest.raises(OSError, match="the query failed"):
        write_file(pa.RecordBatchReader.from_batches(reader().schema, failing()), "csv", out)
    assert out.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == ["q.csv"]
    assert write_file(reader(), "csv", out) == 3 and out.read_text().startswith("model,versions,cost\n")
