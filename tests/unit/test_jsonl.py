"""Canonical JSON lines: the fast file reader and the line-by-line path agree, in order, byte-exact."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from warehouse.sources.canonical import REQUEST_FIELDS
from warehouse.sources.files import split_lines
from warehouse.sources.jsonl import _by_path, parse_json_lines
from warehouse.storage.duck import SCRATCH_THREADS, scratch

START = dt.date(2026, 1, 5)


def _record(request_id: str, day: dt.date) -> dict:
    return {
        "request_id": request_id,
        "ts": f"{day.isoformat()}T10:00:00Z",
        "duration_ms": 12.5,
        "tenant_id": "t1",
        "user_id": "u1",
        "operation": "chat",
        "model": "m1",
        "input_tokens": 10,
        "output_tokens": 5,
        "status_code": 200,
    }


def test_json_lines_parse_the_same_by_reader_and_by_path(tmp_path: Path) -> None:
    lines = [json.dumps(_record(f"r{i}", START)).encode() for i in range(50)]
    lines[3] = b'{"request_id": "r3", "ts": '  # truncated: the reader loses line 4 with it
    lines[7] = b"\xff\xfe not utf-8"
    lines[9] = b"[1, 2]"
    lines[20], lines[21] = b'{"request_id": "r20", "ts": ', b"1}"  # together they would be one object
    lines[30], lines[31] = b"", b" \t\r"
    raw = pa.array(lines, pa.large_binary())
    by_reader = parse_json_lines(raw, REQUEST_FIELDS, folder=tmp_path)
    by_path = _by_path(scratch(), raw, REQUEST_FIELDS)
    assert by_reader.get_column("parse_error").to_list() == by_path.get_column("parse_error").to_list()
    assert by_reader.get_column("request_id").to_list() == by_path.get_column("request_id").to_list()
    assert by_reader.get_column("input_tokens").to_list() == by_path.get_column("input_tokens").to_list()
    assert by_reader.get_column("parse_error").to_list()[3] == "invalid JSON"
    assert by_reader.get_column("parse_error").to_list()[7] == "invalid UTF-8"
    assert by_reader.get_column("parse_error").to_list()[9] == "not a JSON object"
    assert by_reader.get_column("parse_error").to_list()[20:22] == ["invalid JSON"] * 2
    # Given the file's own bytes, the reader reads them in place and must agree too.
    in_place = parse_json_lines(raw, REQUEST_FIELDS, folder=tmp_path, ndjson=b"\n".join(lines) + b"\n")
    assert in_place.equals(by_reader)


def test_line_checks_keep_input_order_on_large_batches(tmp_path: Path) -> None:
    n = 300_000  # in several chunks, which DuckDB scans with more than one thread
    ids = [f"r{i}" for i in range(n)]
    lines = [f'{{"request_id": "{r}", "ts": {i}}}'.encode() if i % 1000 else b"{broken" for i, r in enumerate(ids)]
    chunked = pa.chunked_array([pa.array(lines[i : i + 70_000], pa.large_binary()) for i in range(0, n, 70_000)])
    expected = [None if i % 1000 == 0 else r for i, r in enumerate(ids)]
    scratch().execute("SET threads = 4")  # however many cores this machine has
    try:
        # Both ways of parsing: the file reader, and line by line (the fallback).
        for parsed in (
            parse_json_lines(chunked, ("request_id", "ts"), folder=tmp_path),
            _by_path(scratch(), chunked, ("request_id",)),
        ):
            assert parsed.get_column("request_id").to_list() == expected
            assert parsed.get_column("parse_error").is_not_null().sum() == n // 1000
    finally:
        scratch().execute(f"SET threads = {SCRATCH_THREADS}")


@pytest.mark.parametrize("content", [b"", b"a", b"a\n", b"a\nb", b"a\n\nb\n", b"\n", b"x\r\ny\r\n", b"\n\n"])
def test_lines_are_cut_byte_exact_with_or_without_a_final_terminator(content: bytes) -> None:
    lines = split_lines(content)
    expected = content.split(b"\n")[:-1] if content.endswith(b"\n") else (content.split(b"\n") if content else [])
    assert lines.raw(0, len(lines)).to_pylist() == expected
    assert [lines.raw(i, i + 1)[0].as_py() for i in range(len(lines))] == expected  # batch by batch
    assert b"".join(bytes(lines.block(i, i + 1)) for i in range(len(lines))) == content


def test_parse_files_live_in_the_given_folder_and_are_removed(tmp_path: Path) -> None:
    lines = pa.array([json.dumps(_record(f"r{i}", START)).encode() for i in range(10)], pa.large_binary())
    for checked_ok in (False, True):
        parsed = parse_json_lines(lines, REQUEST_FIELDS, folder=tmp_path, checked_ok=checked_ok)
        assert parsed.get_column("request_id").to_list() == [f"r{i}" for i in range(10)]
    assert list(tmp_path.iterdir()) == []  # each parse file was removed after the read
