"""Writing query results: CSV flattens nested cells to JSON text, JSON is one object per line."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from warehouse.sql.export import write


def reader() -> pa.RecordBatchReader:
    batch = pa.record_batch({"model": ["a", "b"], "versions": [["v1", "v2"], []],
                             "cost": pa.array([Decimal("0.000000001"), None], pa.decimal128(18, 9))})
    return pa.RecordBatchReader.from_batches(batch.schema, [batch, batch.slice(0, 1)])


def test_csv_writes_one_header_and_nested_cells_as_json() -> None:
    out = io.BytesIO()
    assert write(reader(), "csv", out) == 3
    assert out.getvalue().decode().splitlines() == [
        "model,versions,cost", 'a,"[""v1"", ""v2""]",0.000000001', "b,[],", 'a,"[""v1"", ""v2""]",0.000000001']


def test_json_lines_and_an_empty_result() -> None:
    out = io.BytesIO()
    write(reader(), "json", out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows[0]["versions"] == ["v1", "v2"] and rows[1]["cost"] is None and len(rows) == 3
    empty = io.BytesIO()
    schema = pa.schema([("a", pa.int64())])
    assert write(pa.RecordBatchReader.from_batches(schema, []), "csv", empty) == 0
    assert empty.getvalue() == b"a\n"
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        write(reader(), "xml", io.BytesIO())
