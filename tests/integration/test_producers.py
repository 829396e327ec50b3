"""Each producer of :mod:`producers` drives the real ``openai`` client and its spans leave by OTLP/HTTP
protobuf: the groundwork the producer tests of issue 41 build on (their assertions come with them)."""

from __future__ import annotations

import pytest
from openai_server import serve
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from producers import PLAN, PRODUCERS, capture_otlp, run_producer


@pytest.mark.parametrize("producer", PRODUCERS)
def test_a_producer_exports_spans(producer: str) -> None:
    with serve() as base_url, capture_otlp() as captured:
        truth = run_producer(producer, base_url, f"{captured.url}/v1/traces", "token-1")
    spans = 0
    for body in captured.bodies():
        request = ExportTraceServiceRequest.FromString(body)
        spans += sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    assert len(truth) == len(PLAN) and spans > 0
