"""An instrumented ``openai`` client, run as a subprocess by the OTLP tests.

``python tests/genai_client.py BASE_URL TRACES TRUTH_FILE``: sets up the OpenTelemetry
SDK with the official OpenAI instrumentation and an exporter — the OTLP JSON-file exporter
writing to the file ``TRACES``, or, when ``TRACES`` is ``otlp``, whatever the ``OTEL_*``
environment configures through ``opentelemetry-distro``, as ``opentelemetry-instrument`` does for
the service docs/sources.md points at ``strata collect`` (``OTEL_SERVICE_NAME`` and
``OTEL_SEMCONV_STABILITY_OPT_IN`` come from the environment too, no tenant anywhere) — makes a fixed
mix of calls against ``BASE_URL`` with the client's retries off, and writes what the client saw (one
JSON object per call: model, operation, status, tokens, trace and the workflow span around it) to
``TRUTH_FILE``. The process's ``service.instance.id`` comes from ``OTEL_RESOURCE_ATTRIBUTES``. A subprocess keeps
the instrumentation's global patching of ``openai`` out of the test process.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(base_url: str, traces: str, truth_file: str) -> None:
    import openai
    from opentelemetry import trace
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if traces == "otlp":
        from opentelemetry.distro import OpenTelemetryConfigurator

        OpenTelemetryConfigurator().configure()
    else:
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter

        trace.set_tracer_provider(TracerProvider())
        trace.get_tracer_provider().add_span_processor(BatchSpanProcessor(FileSpanExporter(traces)))
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), provider
    OpenAIInstrumentor().instrument()
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    truth: list[dict[str, Any]] = []

    def call(operation: str, model: str, **kwargs: Any) -> None:
        context = trace.get_current_span().get_span_context()
        trace_id = format(context.trace_id, "032x")
        seen: dict[str, Any] = {
            "operation": operation,
            "model": model,
            "status": 200,
            "input_tokens": None,
            "output_tokens": None,
            "workflow": trace_id if trace_id != "0" * 32 else None,
            "parent": format(context.span_id, "016x") if trace_id != "0" * 32 else None,
        }
        try:
            if operation == "embeddings":
                usage = client.embeddings.create(model=model, **kwargs).usage
                seen["input_tokens"] = usage.prompt_tokens
            elif kwargs.get("stream"):
                for chunk in client.chat.completions.create(model=model, **kwargs):
                    if chunk.usage is not None:
                        seen["input_tokens"] = chunk.usage.prompt_tokens
                        seen["output_tokens"] = chunk.usage.completion_tokens
            else:
                usage = client.chat.completions.create(model=model, **kwargs).usage
                seen["input_tokens"], seen["output_tokens"] = usage.prompt_tokens, usage.completion_tokens
        except openai.APIStatusError as exc:
            seen["status"] = exc.status_code
        truth.append(seen)

    def ask(words: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": " ".join(["word"] * words)}]

    tracer = trace.get_tracer("genai-client")
    for i in range(3):
        call("chat", "chat-small", messages=ask(2 + i))
    call("chat", "chat-large", messages=ask(7))
    call("chat", "chat-small", messages=ask(4), stream=True, stream_options={"include_usage": True})
    call("chat", "chat-small", messages=ask(5), stream=True)  # no usage reported
    call("embeddings", "embed-1", input="one two three")
    for model in ("error-400", "error-429", "error-429", "error-500"):
        call("chat", model, messages=ask(3))
    for _ in range(2):  # a workflow of several calls in one trace
        with tracer.start_as_current_span("workflow"):
            call("chat", "chat-large", messages=ask(6))
            call("embeddings", "embed-1", input=["a b", "c"])
            call("chat", "chat-small", messages=ask(2))
    provider.shutdown()  # flushes the exporter
    with open(truth_file, "w", encoding="utf-8") as out:
        json.dump(truth, out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
