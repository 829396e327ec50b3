"""Mapping files are validated whole before anything is written; every error names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHIPPED_AZURE_MAPPING

from warehouse.sources.mapping import MappingError, load_mapping, parse_mapping

GOOD = SHIPPED_AZURE_MAPPING.read_text()


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (_with("name: azure_llm_2023_conv", 'name: "../../../../tmp/x"'), "name"),
        (_with("name: azure_llm_2023_conv", "name: a/b"), "name"),
        (
            _with(
                'timestamp:\n  format: "%Y-%m-%d %H:%M:%S%.f"\n  timezone: UTC',
                "timestamp:\n  unit: s\n  epoch_offset_s: soon",
            ),
            "timestamp.epoch_offset_s",
        ),
        (_with("timezone: UTC", "timezone: Mars/Olympus"), "timestamp.timezone"),
        (_with('  delimiter: ","', '  delimiter: ";;"'), "csv.delimiter"),
        (_with("  header: true", "  header: maybe"), "csv.header"),
        (_with("fields:\n  ts: TIMESTAMP", "fields:\n  ts: TIMESTAMP\n  tokens_in: ContextTokens"), "fields.tokens_in"),
        (_with("constants:\n", "constants:\n  model_name: x\n"), "constants.model_name"),
        (_with("request_id: derive", "request_id: make one up"), "request_id"),
        (GOOD + "colums: [a]\n", "colums"),
        (_with("format: csv", "format: parquet"), "format"),
    ],
)
def test_an_invalid_mapping_names_the_file_and_the_key(text: str, key: str) -> None:
    with pytest.raises(MappingError) as err:
        parse_mapping(text, origin="trace.yaml")
    assert str(err.value).startswith(f"trace.yaml: {key}:"), str(err.value)


def test_a_yaml_alias_bomb_is_refused_at_once() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    assert len(bomb) < 1000  # 9**10 ≈ 3.5 billion strings once expanded
    with pytest.raises(MappingError, match="anchors and aliases"):  # refused before anything expands
        parse_mapping(bomb, origin="bomb.yaml")


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * (1 << 20))
    with pytest.raises(MappingError, match=r"big\.yaml: .* not a mapping file"):
        load_mapping(big)


def test_the_shipped_mapping_is_valid() -> None:
    mapping = parse_mapping(GOOD, origin="shipped")
    assert mapping.name == "azure_llm_2023_conv" and mapping.derive_request_id
    assert mapping.source.startswith("mapping:azure_llm_2023_conv@")


JSONL_HEAD = "name: t\nformat: jsonl\nrequest_id: derive\ntimestamp: {unit: s}\nfields:\n  ts: t\n"


def _rows(fields: str, lines: list[dict], tmp_path: Path, tenant: str | None = None) -> list[dict]:
    import json

    import pyarrow as pa

    from warehouse.sources.mapping import parse_mapped_lines

    mapping = parse_mapping(JSONL_HEAD + fields, origin="t.yaml")
    raw = pa.array([json.dumps({"t": 1, **line}).encode() for line in lines], pa.binary())
    n = len(lines)
    parsed = parse_mapped_lines(
        raw,
        mapping,
        line_no=pa.array(range(1, n + 1)),
        file_sha256=pa.array(["0" * 64] * n),
        folder=tmp_path,
        tenant=tenant,
    )
    return parsed.drop("parse_error", "ts", "request_id").to_dicts()


def test_each_construct_reads_what_its_docstring_says(tmp_path: Path) -> None:
    fields = """\
  user_id: {first: [end_user, [params, user]], empty_as_null: true}
  tenant_id: [meta, team.id]
  model: llm.model
  trace_id: {from: trace, uuid_hex: true}
  operation: {from: call, map: {completion: chat, "no": null}}
  error_type: {from: [err, cls], error_class: true}
  status_code: {from: [err, cls], error_class: true}
  finish_reason: [choices, 1, why]
  duration_ms: {from: end, minus: t, unit: s}
  ttft_ms: {from: first, unit: us, when: {field: stream, equals: true}}
  queue_ms: {from: q, unit: ns, when: {field: kind, in: [a, b]}}
"""
    line = {
        "end_user": "",
        "params": {"user": "u1"},
        "meta": {"team.id": "acme"},
        "llm.model": "m",
        "trace": "9E4264BB-ebb6-47c0-bc93-53774bb84611",
        "call": "completion",
        "err": {"cls": "<class 'openai.RateLimitError'>"},
        "choices": [{"why": "x"}, {"why": "stop"}],
        "end": 3.5,
        "first": 1500,
        "stream": True,
        "q": 2500000,
        "kind": "b",
    }
    other = {"end_user": "u2", "trace": "not-a-uuid", "call": "no", "err": {"cls": "x.Weird"}, "stream": False}
    first, second = _rows(fields, [line, other], tmp_path, tenant="fallback")
    assert first == {
        **first,
        "user_id": "u1",
        "tenant_id": "acme",
        "model": "m",
        "trace_id": "9e4264bbebb647c0bc9353774bb84611",
        "operation": "chat",
        "error_type": "rate_limited",
        "status_code": "429",
        "finish_reason": "stop",
        "duration_ms": "2500",
        "ttft_ms": "1.5",
        "queue_ms": "2.5",
    }
    assert second == {
        **second,
        "user_id": "u2",
        "tenant_id": "fallback",
        "trace_id": "not-a-uuid",
        "operation": None,
        "error_type": "Weird",
        "status_code": None,
        "ttft_ms": None,
        "queue_ms": None,
    }


@pytest.mark.parametrize(
    ("field", "key"),
    [
        ("model: {from: a, first: [b, c]}", "fields.model"),
        ("model: {first: [a]}", "fields.model.first"),
        ("model: {from: a, colour: red}", "fields.model.colour"),
        ("model: {from: a, unit: s}", "fields.model.unit"),
        ("duration_ms: {from: a, unit: hours}", "fields.duration_ms.unit"),
        ("model: {from: a, minus: b}", "fields.model.minus"),
        ("model: {from: a, error_class: true}", "fields.model.error_class"),
        ("model: {from: a, empty_as_null: yes please}", "fields.model.empty_as_null"),
        ("model: {from: a, map: [x]}", "fields.model.map"),
        ("model: {from: a, when: {equals: 1}}", "fields.model.when"),
        ("model: {from: a, when: {field: b, equals: 1, in: [2]}}", "fields.model.when"),
        ("model: [a, -1]", "fields.model"),
        ('model: [a, "it\'s"]', "fields.model"),
        ("model: []", "fields.model"),
    ],
)
def test_a_misused_construct_is_refused_at_load_naming_the_key(field: str, key: str) -> None:
    with pytest.raises(MappingError) as err:
        parse_mapping(JSONL_HEAD + "  " + field + "\n", origin="t.yaml")
    assert str(err.value).startswith(f"t.yaml: {key}:"), str(err.value)


def test_a_csv_mapping_takes_no_nested_path() -> None:
    with pytest.raises(MappingError, match=r"^trace\.yaml: fields\.model: nested paths"):
        parse_mapping(_with("  ts: TIMESTAMP", "  ts: TIMESTAMP\n  model: [TIMESTAMP, a]"), origin="trace.yaml")


def test_the_shipped_litellm_mapping_is_valid() -> None:
    from conftest import REPO

    mapping = load_mapping(REPO / "warehouse" / "sources" / "mappings" / "litellm.yaml")
    assert mapping.fields["tenant_id"].sources == (("metadata", "user_api_key_team_id"),)
