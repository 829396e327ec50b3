"""Capture what OpenLIT and LiteLLM send for :data:`producers.PLAN`, offline, into this folder.

Each producer needs packages Strata's lock cannot hold (README.md here has the pins), so each
capture runs in its own scratch virtual environment; the third step, in the repository's own
environment, writes the JSON form of every captured body with Strata's converter:

    /tmp/venv-openlit/bin/python tests/data/producers/capture.py openlit
    /tmp/venv-litellm/bin/python tests/data/producers/capture.py litellm
    .venv/bin/python tests/data/producers/capture.py json

A capture serves the fake OpenAI server (tests/openai_server.py) and an OTLP/HTTP stand-in that
keeps the bodies (``producers.capture_otlp``) in this process, makes the plan's calls through the
producer, and writes ``<producer>/traces-NNN.pb`` (one OTLP/HTTP protobuf request body each, in
arrival order) and ``<producer>/truth.json`` (what the client saw, call by call); LiteLLM also
writes ``litellm/payloads.jsonl``, its StandardLoggingPayload of each call (a custom callback's
``kwargs["standard_logging_object"]``, what its bucket loggers and spend logs hold).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent)]

from openai_server import serve  # noqa: E402  (after the path above)
from producers import CHAT, CHAT_LARGE, EMBED, Captured, capture_otlp, make_calls  # noqa: E402

#: OpenLIT's prices (USD per 1k tokens) for the plan's models, so it fetches no pricing file.
OPENLIT_PRICES = {
    "chat": {
        CHAT: {"promptPrice": 0.00015, "completionPrice": 0.0006},
        CHAT_LARGE: {"promptPrice": 0.0025, "completionPrice": 0.01},
    },
    "embeddings": {EMBED: 0.00002},
}


def _write(producer: str, captured: Captured, truth: list[dict[str, Any]]) -> Path:
    """Write the captured trace bodies and the truth under ``HERE/producer``, replacing an earlier capture."""
    folder = HERE / producer
    folder.mkdir(exist_ok=True)
    for old in [*folder.glob("traces-*.pb"), *folder.glob("traces-*.json")]:
        old.unlink()
    others = sorted({path for path, _, _ in captured.requests} - {"/v1/traces"})
    if others:
        raise RuntimeError(f"{producer} sent more than traces: {others}")
    for number, body in enumerate(captured.bodies(), 1):
        (folder / f"traces-{number:03d}.pb").write_bytes(body)
    (folder / "truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    return folder


def capture_openlit() -> None:
    """OpenLIT instrumenting the ``openai`` client: traces only, message content captured."""
    import openai
    import openlit
    from opentelemetry import trace

    prices = HERE / "openlit" / "prices.json"
    prices.parent.mkdir(exist_ok=True)
    prices.write_text(json.dumps(OPENLIT_PRICES, indent=1) + "\n", encoding="utf-8")
    with serve() as base_url, capture_otlp() as captured:
        openlit.init(
            otlp_endpoint=captured.url,  # the SDK appends /v1/traces
            otlp_headers={"Authorization": "Bearer token-openlit"},
            application_name="chat-app",
            environment="test",
            capture_message_content=True,
            disable_metrics=True,
            disable_events=True,
            pricing_json=str(prices),
        )
        client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        truth = make_calls(client.chat.completions.create, client.embeddings.create, content_capture=True)
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]  # flushes the exporter
    _write("openlit", captured, truth)


def _team_metadata(team: str, user: str | None) -> dict[str, Any]:
    """What LiteLLM's proxy puts into a request's metadata for a virtual key of ``team`` (the SDK takes
    it as given): team, the key's owner and hash, their email and the caller's IP address."""
    owner = f"owner-of-{user or 'none'}"
    return {
        "user_api_key_team_id": team,
        "user_api_key_team_alias": f"{team} (alias)",
        "user_api_key_user_id": owner,
        "user_api_key_user_email": f"{owner}@example.com",
        "user_api_key_hash": hashlib.sha256(f"sk-{team}-{owner}".encode()).hexdigest(),
        "user_api_key_alias": f"key-of-{owner}",
        "requester_ip_address": "10.0.0.7",
    }


def capture_litellm() -> None:
    """LiteLLM's SDK calling the fake server as ``openai/<model>``: its ``otel`` callback (OTLP/HTTP) and
    its StandardLoggingPayload of each call, content logged (its default)."""
    with serve() as base_url, capture_otlp() as captured:
        os.environ |= {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the cost map in the wheel, not fetched
            "OTEL_EXPORTER": "otlp_http",
            "OTEL_ENDPOINT": f"{captured.url}/v1/traces",
            "OTEL_HEADERS": "Authorization=Bearer token-litellm",
            "OTEL_SERVICE_NAME": "gateway",
        }
        import litellm
        from litellm.integrations.custom_logger import CustomLogger
        from opentelemetry import trace

        payloads: list[dict[str, Any]] = []

        class Payloads(CustomLogger):  # type: ignore[misc]
            def log_success_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
                payloads.append(kwargs["standard_logging_object"])

            def log_failure_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
                payloads.append(kwargs["standard_logging_object"])

        litellm.callbacks = ["otel", Payloads()]

        def route(call: Any, **kwargs: Any) -> Any:
            team = kwargs.pop("team", None)
            if team:  # LiteLLM fails on metadata=None
                kwargs["metadata"] = _team_metadata(team, kwargs.get("user"))
            model = f"openai/{kwargs.pop('model')}"
            return call(model=model, api_base=base_url, api_key="test-key", num_retries=0, **kwargs)

        truth = make_calls(
            lambda **kw: route(litellm.completion, **kw),
            lambda **kw: route(litellm.embedding, **kw),
            content_capture=True,
            teams=True,
        )
        deadline = time.monotonic() + 30  # sync calls log from a thread pool
        while len(payloads) < len(truth) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # the otel callback runs in the same pool, after the custom logger
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]  # flushes the exporter
    folder = _write("litellm", captured, truth)
    if len(payloads) != len(truth):
        raise RuntimeError(f"LiteLLM logged {len(payloads)} payloads for {len(truth)} calls")
    with open(folder / "payloads.jsonl", "w", encoding="utf-8") as out:
        for payload in sorted(payloads, key=lambda p: p["startTime"]):  # the calls' order
            out.write(json.dumps(payload, default=str) + "\n")


def write_json() -> None:
    """Each captured ``traces-NNN.pb`` as ``traces-NNN.json``: the OTLP/JSON line Strata's receiver writes."""
    from warehouse.sources.collector.encoding import decode

    for body in sorted(HERE.glob("*/traces-*.pb")):
        line = decode(body.read_bytes(), "application/x-protobuf", None).line
        if line is None:
            raise RuntimeError(f"{body} holds no spans")
        body.with_suffix(".json").write_bytes(line + b"\n")


if __name__ == "__main__":
    steps = {"openlit": capture_openlit, "litellm": capture_litellm, "json": write_json}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        sys.exit(f"usage: capture.py {{{'|'.join(steps)}}}")
    steps[sys.argv[1]]()
