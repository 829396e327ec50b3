"""The producer dialect table: which spans are calls, whose users they name, and Python literals read as data."""

from __future__ import annotations

import pytest

from warehouse.sources.dialects import LITERAL_MAX_DEPTH, is_call_span, literal, user_keys


@pytest.mark.parametrize(
    ("scope", "name", "attributes", "call"),
    [
        ("litellm", "litellm_request", {"llm.request.type": "acompletion"}, True),
        ("litellm", "raw_gen_ai_request", {"llm.openai.model": "m"}, False),  # the provider request under it
        ("opentelemetry.instrumentation.httpx", "POST", {"http.url": "u"}, False),  # OpenLIT's httpx child
        ("openlit.instrumentation.openai", "chat m", {"gen_ai.operation.name": "chat"}, True),
        ("openinference.instrumentation.openai", "ChatCompletion", {"openinference.span.kind": "LLM"}, True),
        ("openinference.instrumentation.openai", "Agent", {"openinference.span.kind": "CHAIN"}, False),
        ("opentelemetry.instrumentation.openai.v1", "openai.chat", {"llm.request.type": "chat"}, True),
        ("any", "chat m", {"gen_ai.request.model": "m"}, True),
        ("any", "workflow", {"app.step": "1"}, False),
    ],
)
def test_a_span_is_a_call_as_its_dialect_says(scope: str, name: str, attributes: dict, call: bool) -> None:
    assert is_call_span(scope, name, attributes) is call


def test_user_keys_are_each_dialects_end_user_never_the_keys_owner() -> None:
    every = user_keys()
    assert every[:2] == ("user.id", "enduser.id")
    assert {"gen_ai.user", "gen_ai.request.user", "llm.user", "llm.invocation_parameters#user"} <= set(every)
    assert "metadata.user_api_key_user_id" not in every
    assert user_keys("litellm") == (
        "user.id",
        "enduser.id",
        "llm.user",
        "metadata.user_api_key_end_user_id",
        "llm.openai.user",
        "llm.None.user",
    )
    with pytest.raises(ValueError, match="unknown dialect 'nope'"):
        user_keys("nope")


def test_a_python_literal_is_parsed_as_data_never_evaluated() -> None:
    usage = "{'prompt_tokens': 4, 'prompt_tokens_details': {'cached_tokens': 2}, 'x': None, 'y': (True, -1.5)}"
    assert literal(usage) == {
        "prompt_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 2},
        "x": None,
        "y": [True, -1.5],
    }
    for code in ("__import__('os').system('true')", "{**a}", "[1 for _ in ()]", "1 + 1"):
        with pytest.raises(ValueError, match="not a Python literal"):
            literal(code)
    with pytest.raises(ValueError, match="deeper"):
        literal("[" * (LITERAL_MAX_DEPTH + 1) + "]" * (LITERAL_MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="characters"):
        literal("'" + "x" * 20_000 + "'")


def _line(scope: str, name: str, attributes: dict[str, object], events: list[dict] | None = None) -> bytes:
    import json

    def value(v: object) -> dict:
        return {"boolValue": v} if isinstance(v, bool) else {"stringValue": v}

    span = {
        "traceId": "0" * 31 + "1",
        "spanId": "0" * 15 + "2",
        "name": name,
        "startTimeUnixNano": "1000000000",
        "endTimeUnixNano": "2000000000",
        "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
        "events": events or [],
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"scope": {"name": scope}, "spans": [span]}]}]}).encode()


def test_values_inside_literals_json_urls_events_and_under_conditions() -> None:
    import pyarrow as pa

    from warehouse.sources.otlp import parse_otlp_lines

    litellm = _line(
        "litellm",
        "litellm_request",
        {
            "llm.request.type": "aembedding",
            "llm.user": "",
            "gen_ai.usage.completion_tokens": "0",
            "metadata.usage_object": "{'prompt_tokens_details': {'cached_tokens': 3}}",
            "hidden_params": '{"api_base": "https://gw.example:8443/v1"}',
            "error.code": "429",
        },
    )
    openlit = _line(
        "openlit.otel", "chat m", {"gen_ai.request.stream": False, "gen_ai.server.time_to_first_token": "0.5"}
    )
    openinference = _line(
        "x",
        "ChatCompletion",
        {"openinference.span.kind": "LLM", "llm.invocation_parameters": '{"model": "m", "user": "u-1"}'},
        [{"name": "First Token Stream Event", "timeUnixNano": "1250000000"}],
    )
    rows = parse_otlp_lines(pa.array([litellm, openlit, openinference], pa.binary())).to_dicts()
    assert [r["operation"] for r in rows] == ["embeddings", None, "chat"]
    assert (rows[0]["cached_input_tokens"], rows[0]["server"], rows[0]["user_id"]) == ("3", "gw.example", None)
    assert (rows[0]["output_tokens"], rows[0]["status_code"], rows[0]["error_type"]) == (None, "429", "rate_limited")
    assert rows[1]["ttft_ms"] is None  # OpenLIT's TTFT of a call that did not stream is its whole latency
    assert (rows[2]["model"], rows[2]["user_id"], rows[2]["ttft_ms"]) == ("m", "u-1", "250")


def test_forgetting_a_litellm_user_removes_their_calls_and_the_child_spans_under_them() -> None:
    import json
    from pathlib import Path

    from warehouse.sources.span_erasure import remove_spans

    line = (Path(__file__).resolve().parents[1] / "data" / "producers" / "litellm" / "traces-001.json").read_bytes()

    def spans(export: bytes) -> list[dict]:
        return [s for rs in json.loads(export)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]

    kept = remove_spans(line.strip(), lambda user, _start: user == "user-3")
    assert kept is not None
    users = {
        a["value"].get("stringValue")
        for s in spans(kept)
        for a in s.get("attributes", [])
        if a["key"].endswith(".user")
    }
    assert "user-3" not in users and {"user-1", "user-2", "user-4"} <= users
    assert len(spans(kept)) == len(spans(line)) - 4 - 3  # user-3's 4 calls, 3 with a raw_gen_ai_request under them
