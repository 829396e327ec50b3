"""Spool segments converted on the ingest side: their OTLP/JSON lines written aside and renamed into
place before the segment goes; a conversion cut short is finished, never repeated."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from contracts.errors import InputError
from warehouse.sources.collector.encoding import JSON, PROTOBUF, accept, decode
from warehouse.sources.collector.segments import convert_pending, convert_segment, frame


def _protobuf_body() -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat m1", start_time_unix_nano=1_770_000_000 * 10**9)
    return request.SerializeToString()


def _segment(folder: Path, name: str = "collect-h-1-abcd0123-000001") -> tuple[Path, list[bytes]]:
    """A segment of a JSON and a token's protobuf record, and the lines it converts to."""
    body = _protobuf_body()
    json_line = b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x"}]}]}]}'
    records = [accept(json_line, JSON, None).record, accept(body, PROTOBUF, "acme").record]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.otlp.spool"
    path.write_bytes(b"".join(frame(r) for r in records if r))
    return path, [json_line, decode(body, PROTOBUF, "acme").line or b""]


def test_a_segment_becomes_its_otlp_json_lines_beside_it_and_is_deleted(tmp_path: Path) -> None:
    segment, lines = _segment(tmp_path / "otlp" / "date=2026-02-02")
    converted = convert_segment(segment)
    assert converted == segment.with_name("collect-h-1-abcd0123-000001.otlp.jsonl")
    assert converted.read_bytes() == b"".join(line + b"\n" for line in lines)
    assert b'"stringValue":"acme"' in converted.read_bytes()  # the token's tenant travelled in the record
    assert b'"traceId":"01010101010101010101010101010101"' in converted.read_bytes()
    assert [p.name for p in segment.parent.iterdir()] == [converted.name]


def test_a_conversion_cut_short_keeps_the_converted_file_and_deletes_the_segment(tmp_path: Path) -> None:
    segment, _ = _segment(tmp_path)
    kept = segment.with_name("collect-h-1-abcd0123-000001.otlp.jsonl")
    kept.write_bytes(b"what the first run (or a forget since) left\n")
    assert convert_segment(segment) == kept
    assert kept.read_bytes() == b"what the first run (or a forget since) left\n" and not segment.exists()


def test_concurrent_conversions_of_one_segment_write_it_once(tmp_path: Path) -> None:
    segment, lines = _segment(tmp_path)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(convert_segment(segment))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1 and results[0].read_bytes() == b"".join(line + b"\n" for line in lines)
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]


def test_a_damaged_segment_is_reported_and_left_where_it_is(tmp_path: Path) -> None:
    segment, _ = _segment(tmp_path)
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged"):
        convert_segment(segment)
    done = convert_pending([tmp_path])
    assert done.paths == [tmp_path] and [p for p, _ in done.failed] == [segment]
    assert [p.name for p in tmp_path.iterdir()] == [segment.name]  # no half-written file beside it


def test_a_segment_named_is_replaced_by_its_converted_file_and_other_paths_pass_through(tmp_path: Path) -> None:
    segment, _ = _segment(tmp_path / "a")
    other = tmp_path / "b" / "export.json"
    other.parent.mkdir()
    other.write_text("{}")
    done = convert_pending([segment, other, tmp_path / "b"])
    assert done.paths == [segment.with_name("collect-h-1-abcd0123-000001.otlp.jsonl"), other, tmp_path / "b"]
    assert not done.failed and not segment.exists()
