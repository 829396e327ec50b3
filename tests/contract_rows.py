"""The shipped contracts, and rows that keep every rule of a contract, built from it alone (for tests)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import polars as pl
import pyarrow as pa

#: The contracts the project ships, named by hand: the tests of every contract read this list, not the folder.
CONTRACT_NAMES = frozenset(
    {
        "ods.request_log_raw",
        "ods.feedback_raw",
        "dwd.request",
        "dwd.feedback",
        "dwd.span",
        "dwd.quarantine",
        "ops.audit_log",
        "ops.books",
        "ops.landed_files",
        "ops.forgotten_users",
        "ops.suppressed_records",
        "dwd.model_price",
        "dws.user_features",
        "dws.tenant_features",
        "dws.model_features",
        "dwd.tenant_quota",
        "ads.model_daily",
        "ads.tenant_daily",
        "ads.latency_breakdown",
        "ads.retry_storms",
        "ads.version_mix",
        "ads.capacity",
        "ads.cold_starts",
        "ads.server_drift",
        "ads.token_anomalies",
        "ads.retry_policy",
        "ads.trace_breakdown",
        "ads.data_quality",
        "ads.user_risk_scores",
        "ads.score_daily",
        "ads.feature_consistency",
    }
)
TS = datetime(2026, 1, 1, 12, tzinfo=UTC)
#: Patterns of lower-case hex ids, by their length.
HEX_IDS = {"^[0-9a-f]{16}$": 16, "^[0-9a-f]{32}$": 32}
PATTERN_EXAMPLES = {
    "^[0-9a-f]{32}$": "0123456789abcdef0123456789abcdef",
    "^[0-9a-f]{64}$": "ab" * 32,
    "^(?:ods|dwd|dws|ads|ops)\\.[a-z][a-z0-9_]*$": "dwd.request",
    "^dwd\\.[a-z][a-z0-9_]*$": "dwd.request",
    "^\\{[\\s\\S]*\\}$": '{"region": "eu"}',
    "^v[0-9]+$": "v1",
    "^[^\\x00-\\x1F\\x7F-\\x9F]*$": "naïve-id €",
}


def synthetic(contract: Any, n: int = 3) -> pl.DataFrame:
    """``n`` rows that keep every rule of ``contract`` (distinct keys), built from the contract alone."""
    columns: dict[str, list[Any]] = {}
    for c in contract.columns:
        t = c.arrow_type
        if c.allowed_values:
            values = [c.allowed_values[i % len(c.allowed_values)] for i in range(n)]
        elif c.pattern in HEX_IDS:  # distinct: an id may be (part of) the key
            values = [format(i, f"0{HEX_IDS[c.pattern]}x") for i in range(n)]
        elif c.pattern:
            values = [PATTERN_EXAMPLES[c.pattern]] * n
        elif pa.types.is_string(t):
            values = [f"{c.name}-{i}" for i in range(n)]
        elif pa.types.is_binary(t):
            values = [b"raw line"] * n
        elif pa.types.is_boolean(t):
            values = [i % 2 == 0 for i in range(n)]
        elif pa.types.is_integer(t) or pa.types.is_floating(t):
            low = c.minimum if c.minimum is not None else 0
            values = [low + i if c.maximum is None else low + i % 2 for i in range(n)]
        elif pa.types.is_timestamp(t):
            values = [TS - timedelta(hours=i) for i in range(n)]
        elif pa.types.is_date(t):
            values = [date(2026, 1, 1)] * n
        elif pa.types.is_decimal(t):
            values = [Decimal("0.000000001") * i for i in range(n)]
        elif pa.types.is_list(t):
            inner = t.value_type
            item: Any = (
                1
                if pa.types.is_integer(inner)
                else 0.5
                if pa.types.is_floating(inner)
                else date(2026, 1, 1)
                if pa.types.is_date(inner)
                else "x.required"
            )
            values = [[item]] * n
        else:
            raise AssertionError(f"no synthetic values for {t}")
        columns[c.name] = values
    return pl.DataFrame(columns)
