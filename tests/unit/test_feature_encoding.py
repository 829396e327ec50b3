"""Our column encoders give exactly the bytes Feast's own conversion gives, for every type and edge."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest


@pytest.mark.parametrize(
    "array, kind",
    [
        (pa.array([1.5, None, float("nan"), 0.0, -2.25, 1e-300, float("inf")], pa.float64()), "DOUBLE"),
        (pa.array([1.5, None, 0.1, -3.0], pa.float32()), "FLOAT"),
        (pa.array([0, None, 1, -1, 127, 128, 2**40, -(2**40)], pa.int64()), "INT64"),
        # Feast converts a column with nulls through float64 (exact only below 2**53): extremes without nulls.
        (pa.array([-(2**63), 2**63 - 1, 2**53 + 1], pa.int64()), "INT64"),
        (pa.array([0, None, -5, 2**31 - 1, -(2**31)], pa.int32()), "INT32"),
        (pa.array(["a", None, "", "ü" * 200], pa.string()), "STRING"),
        (pa.array([True, None, False]), "BOOL"),
    ],
)
def test_values_equal_feasts_bytes_and_text(array: pa.Array, kind: str) -> None:
    from feast.infra.online_stores.helpers import extract_text_and_num
    from feast.type_map import python_values_to_proto_values
    from feast.value_type import ValueType

    from features.encoding import values
    from features.online import decode

    protos = python_values_to_proto_values(array.to_numpy(zero_copy_only=False), ValueType[kind])
    encoded, texts = values(array, None)
    assert encoded == [p.SerializeToString() for p in protos]
    assert texts == [extract_text_and_num(p, False)[0] for p in protos]
    from feast.type_map import feast_value_type_to_python_type

    assert [decode(b) for b in encoded] == [feast_value_type_to_python_type(p) for p in protos]


def test_entity_keys_equal_feasts_serialization() -> None:
    from feast.infra.key_encoding_utils import serialize_entity_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    from features.encoding import entity_keys

    keys = ["0123456789abcdef0123456789abcdef", "", "gpt-4o@2024-08-06", "ü"]
    assert entity_keys("model_key", pa.array(keys)) == [
        serialize_entity_key(EntityKey(join_keys=["model_key"], entity_values=[Value(string_val=k)]), 3) for k in keys
    ]


def test_redis_field_names_and_times_equal_feasts() -> None:
    from feast.infra.online_stores.helpers import _mmh3
    from google.protobuf.timestamp_pb2 import Timestamp

    from features.online_store import mmh3_field, redis_timestamp

    assert mmh3_field("user_features", "error_rate_1h") == _mmh3("user_features:error_rate_1h")
    ts = dt.datetime(2026, 3, 2, 13, 0, 0, 250_000, tzinfo=dt.UTC)
    stamp = Timestamp()
    stamp.FromDatetime(ts)
    assert redis_timestamp(ts) == stamp.SerializeToString()
