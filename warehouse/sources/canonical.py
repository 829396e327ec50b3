"""The canonical record fields (docs/design.md §2) every source format is mapped onto.

Parsers return these fields as *text*, exactly as the source wrote them; typing,
range checks and quarantine happen in DWD against the contract, so a bad value is
reported with the rule it broke rather than lost in a parser.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

Kind: TypeAlias = Literal["requests", "feedback"]

REQUEST_FIELDS: tuple[str, ...] = (
    "request_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "retry_of",
    "attempt",
    "ts",
    "duration_ms",
    "ttft_ms",
    "queue_ms",
    "preprocess_ms",
    "inference_ms",
    "postprocess_ms",
    "tenant_id",
    "user_id",
    "api_key_id",
    "operation",
    "model",
    "model_version",
    "provider",
    "server",
    "server_instance",
    "prompt_template_version",
    "pipeline_version",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "batch_size",
    "status_code",
    "error_type",
    "finish_reason",
    "cache_hit",
    "attributes",
)
#: What a source of spans adds to a request record beside the canonical fields, so DWD counts a call seen at
#: several levels of one trace once: the level its producer sees calls at (``dialects.LEVELS``) and the
#: span's id and its parent's (lower-case hex). Null from other sources; never a column of DWD.
LINK_FIELDS: tuple[str, ...] = ("_level", "_span_id", "_parent_span_id")
#: The fields of a span that is no call (a workflow's parent, a retrieval, a web handler): a row of ``dwd.span``.
#: Only sources of spans (OTLP) have them, as text like the canonical fields.
SPAN_FIELDS: tuple[str, ...] = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "service",
    "server_instance",
    "tenant_id",
    "user_id",
    "ts",
    "duration_ms",
    "status",
    "attributes",
)
FEEDBACK_FIELDS: tuple[str, ...] = ("request_id", "ts", "kind", "value", "source")
#: Lines longer than this are not parsed (kept in ODS, quarantined in DWD as malformed).
MAX_LINE_BYTES = 1 << 20


def fields_for(kind: Kind) -> tuple[str, ...]:
    """Canonical fields of a record kind."""
    return REQUEST_FIELDS if kind == "requests" else FEEDBACK_FIELDS
