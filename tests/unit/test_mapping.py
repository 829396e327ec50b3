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
