"""Real LLM-telemetry producers driven offline, for the producer tests and the captures in ``tests/data/producers/``.

:data:`PLAN` is one fixed mix of calls (chat, streams with and without usage, embeddings, a 429
and a 400, calls with ``user=`` and a LiteLLM team); :func:`make_calls` makes them through any
OpenAI-shaped client and returns what the client saw, call by call — the ground truth.
:func:`run_producer` runs the plan in a subprocess (instrumentations patch ``openai`` globally)
with the real ``openai`` client instrumented by one producer — OpenInference, OpenLLMetry or the
official openai-v2 — exporting OTLP/HTTP protobuf with a bearer token, as to ``strata collect``.
:func:`capture_otlp` is a stand-in receiver that keeps every body it is sent.

``python tests/producers.py PRODUCER BASE_URL ENDPOINT TOKEN TRUTH_FILE [--no-content]`` is the
subprocess. Only the standard library is imported at module level: the capture scripts import this
module from scratch virtual environments that hold another producer and no Strata.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRODUCERS = ("openinference", "openllmetry", "openai_v2")
#: Models the fake server (tests/openai_server.py) answers; names LiteLLM and OpenLIT know, so
#: neither reaches for a tokenizer or a price of an unknown model. ``error-*`` answer that status.
CHAT, CHAT_LARGE, EMBED = "gpt-4o-mini", "gpt-4o", "text-embedding-3-small"


def _plan() -> list[dict[str, Any]]:
    """The calls, in order: each names its operation, model, prompt length in words, stream mode, user, team
    and (embeddings) how many inputs."""
    calls: list[dict[str, Any]] = []

    def add(operation: str, model: str, words: int = 3, **options: Any) -> None:
        calls.append(
            {"operation": operation, "model": model, "words": words, "stream": False, "include_usage": False}
            | {"user": None, "team": None, "inputs": 1}
            | options
        )

    for words in (2, 3, 4):
        add("chat", CHAT, words)
    add("chat", CHAT_LARGE, 7, user="user-1", team="team-a")
    add("chat", CHAT, 5, user="user-2", team="team-b")
    add("chat", CHAT, 6, user="user-3", team="team-a")
    add("chat", CHAT, 4, stream=True, include_usage=True, user="user-1", team="team-a")
    add("chat", CHAT_LARGE, 5, stream=True, include_usage=True)
    add("chat", CHAT, 5, stream=True)  # the server sends no usage
    add("chat", CHAT, 3, stream=True, user="user-2", team="team-b")
    add("embeddings", EMBED, 3)
    add("embeddings", EMBED, 2, inputs=2, user="user-3", team="team-b")
    add("chat", "error-429", 3)
    add("chat", "error-429", 3, user="user-1", team="team-a")
    add("chat", "error-400", 3)
    add("chat", "error-400", 3, user="user-2", team="team-b")
    add("chat", "error-429", 3, stream=True, include_usage=True, user="user-3")
    add("chat", CHAT, 8, user="user-4", team="team-b")
    add("chat", CHAT_LARGE, 2, user="user-3", team="team-a")
    add("embeddings", EMBED, 4, inputs=2, user="user-1", team="team-a")
    return calls


PLAN: list[dict[str, Any]] = _plan()


def _usage_tokens(usage: Any) -> tuple[int | None, int | None, int | None]:
    """Input, output and cached input tokens of an OpenAI-shaped ``usage`` (``None`` for what it lacks)."""
    if usage is None:
        return None, None, None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None), cached


def make_calls(
    chat: Callable[..., Any], embed: Callable[..., Any], *, content_capture: bool, teams: bool = False
) -> list[dict[str, Any]]:
    """Make :data:`PLAN`'s calls with ``chat(**kwargs)`` / ``embed(**kwargs)`` (OpenAI's keyword arguments;
    ``team=`` too when ``teams``); return what the client saw for each call, in order.

    A call that fails with an HTTP status (``exc.status_code``, as ``openai`` and LiteLLM raise) is
    recorded with that status and the exception's class; any other failure propagates.
    """
    truth: list[dict[str, Any]] = []
    for index, spec in enumerate(PLAN):
        kwargs: dict[str, Any] = {"model": spec["model"]}
        if spec["user"]:
            kwargs["user"] = spec["user"]
        if teams and spec["team"]:
            kwargs["team"] = spec["team"]
        seen: dict[str, Any] = {
            "index": index,
            "operation": spec["operation"],
            "model": spec["model"],
            "stream": spec["stream"],
            "include_usage": spec["include_usage"],
            "user": spec["user"],
            "team": spec["team"] if teams else None,
            "content_capture": content_capture,
            "status": 200,
            "error_type": None,
            "input_tokens": None,
            "output_tokens": None,
            "cached_tokens": None,
            "response_id": None,
            "response_model": None,
        }
        try:
            if spec["operation"] == "embeddings":
                words = ["word"] * spec["words"]
                text = " ".join(words) if spec["inputs"] == 1 else [" ".join(words[:1]), " ".join(words[1:])]
                response = embed(input=text, **kwargs)
                seen["input_tokens"] = _usage_tokens(response.usage)[0]
                seen["response_model"] = response.model
            else:
                kwargs["messages"] = [{"role": "user", "content": " ".join(["word"] * spec["words"])}]
                if spec["stream"]:
                    kwargs["stream"] = True
                    if spec["include_usage"]:
                        kwargs["stream_options"] = {"include_usage": True}
                    for chunk in chat(**kwargs):
                        seen["response_id"] = seen["response_id"] or getattr(chunk, "id", None)
                        seen["response_model"] = seen["response_model"] or getattr(chunk, "model", None)
                        if getattr(chunk, "usage", None) is not None:
                            seen["input_tokens"], seen["output_tokens"], seen["cached_tokens"] = _usage_tokens(
                                chunk.usage
                            )
                else:
                    response = chat(**kwargs)
                    seen["response_id"], seen["response_model"] = response.id, response.model
                    seen["input_tokens"], seen["output_tokens"], seen["cached_tokens"] = _usage_tokens(response.usage)
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if not isinstance(status, int):
                raise
            seen["status"], seen["error_type"] = status, type(exc).__name__
        truth.append(seen)
    return truth


@dataclass
class Captured:
    """What :func:`capture_otlp` was sent: each request's path, headers and body, in arrival order."""

    url: str
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def bodies(self, path: str = "/v1/traces") -> list[bytes]:
        return [body for got, _, body in self.requests if got == path]


@contextmanager
def capture_otlp() -> Iterator[Captured]:
    """An OTLP/HTTP stand-in on a free port of 127.0.0.1 answering every POST 200 with an empty
    protobuf response (no partial success); yields :class:`Captured`, its ``url`` the base URL."""
    captured = Captured(url="")
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                captured.requests.append((self.path, dict(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="otlp-capture", daemon=True)
    thread.start()
    captured.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield captured
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run_producer(
    producer: str, base_url: str, endpoint: str, token: str, *, content_capture: bool = True, service: str = "chat-app"
) -> list[dict[str, Any]]:
    """Run :data:`PLAN` with the ``openai`` client instrumented by ``producer`` (one of :data:`PRODUCERS`)
    in a subprocess, against the OpenAI-compatible ``base_url``, exporting to the OTLP/HTTP traces URL
    ``endpoint`` with ``Authorization: Bearer <token>`` under ``service.name`` ``service``; returns
    what the client saw (:func:`make_calls`). Exported when it returns: the provider is shut down."""
    if producer not in PRODUCERS:
        raise ValueError(f"unknown producer {producer!r}; one of {', '.join(PRODUCERS)}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACELOOP_", "OPENINFERENCE_"))}
    env["OTEL_SERVICE_NAME"] = service
    with tempfile.TemporaryDirectory(prefix="producer-") as folder:
        truth = Path(folder) / "truth.json"
        args = [producer, base_url, endpoint, token, str(truth)] + ([] if content_capture else ["--no-content"])
        done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"the {producer} client exited with {done.returncode}: {done.stderr[-2000:]}")
        return json.loads(truth.read_text())


def _instrument(producer: str, content_capture: bool) -> None:
    """Instrument ``openai`` with ``producer``, its content capture on or off by its own switch."""
    if producer == "openinference":
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        hide = not content_capture
        OpenInference().instrument(config=TraceConfig(hide_inputs=hide, hide_outputs=hide))
    elif producer == "openllmetry":
        os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if content_capture else "false"
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry

        OpenLLMetry().instrument()
    else:  # the official instrumentation, in the latest conventions
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = (
            "SPAN_ONLY" if content_capture else "NO_CONTENT"
        )
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIv2

        OpenAIv2().instrument()


def main(producer: str, base_url: str, endpoint: str, token: str, truth_file: str, *flags: str) -> None:
    import openai
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    content_capture = "--no-content" not in flags
    provider = TracerProvider()  # service.name from OTEL_SERVICE_NAME
    exporter = OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {token}"})
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _instrument(producer, content_capture)
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    truth = make_calls(client.chat.completions.create, client.embeddings.create, content_capture=content_capture)
    provider.shutdown()  # flushes the exporter
    Path(truth_file).write_text(json.dumps(truth, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
