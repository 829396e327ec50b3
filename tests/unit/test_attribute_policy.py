"""The attribute policy cleans a column as it cleans each value: the flat objects it passes by their keys
alone come out exactly as :meth:`AttributePolicy.clean` gives them."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.policy import load_policy

POLICY = load_policy("attributes")
EDGES = [
    '{"region":"eu-west-1","client":"python-sdk/1.4.2"}',
    '{"a":1}',
    '{"a":1.50}',  # a float is written again by clean: not passed as it is
    '{"a":-0}',
    "{}",
    "[1]",
    "5",
    None,
    "not json",
    '{"gen_ai.input.messages":"hi"}',
    '{"a":"bob@example.com"}',
    '{"a":"x","a":"y"}',
    '{"a": 1}',
    '{"a":"{\\"user\\":\\"u\\"}"}',
    '{"otel.span_id":"ab","llm.invocation_parameters":"{\\"user\\":\\"u1\\",\\"model\\":\\"m\\"}"}',
    '{"a":"\\u00e9"}',
    '{"k":"a:b","m":true}',
    '{"error.message":"boom","x":2}',
    '{"a":"b\x01"}',
    '{"a":[1]}',
    '{"a":{"user":"x"}}',
]


def test_a_column_is_cleaned_as_each_of_its_values() -> None:
    assert POLICY.clean_column(pl.Series("attributes", EDGES, pl.String)).to_list() == [POLICY.clean(t) for t in EDGES]


KEYS = st.sampled_from(["region", "client", "otel.span_id", "gen_ai.user", "llm.user", "error.message", "a.b", "x"])
VALUES = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["bob@example.com", '{"user":"u"}', "[1]"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(KEYS, VALUES, max_size=4), max_size=20))
def test_any_flat_objects_are_cleaned_as_one_by_one(objects: list[dict[str, object]]) -> None:
    texts = [json.dumps(o, ensure_ascii=False, separators=(",", ":")) for o in objects]
    assert POLICY.clean_column(pl.Series(texts, dtype=pl.String)).to_list() == [POLICY.clean(t) for t in texts]
