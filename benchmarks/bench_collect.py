"""``strata collect`` under load: several senders on 127.0.0.1 for a fixed time, against a bare receiver.

Each of ``SENDERS`` processes posts protobuf ``ExportTraceServiceRequest``\\s of ``SPANS`` GenAI
spans (what the OpenTelemetry SDK's OTLP/HTTP exporter sends) one after another, as an exporter
does, for ``SECONDS``; a request not answered 200 is retried. The receiver answers once a
request's record is fsynced, and hands each closed segment to the landing zone unparsed (a
rename); ``strata ingest`` converts the segments to OTLP/JSON lines later, elsewhere. It runs
twice: with one segment that does not close in the window (the request path alone: parse, check,
append, fsync), and with 1 s segments rolled and handed over meanwhile (sustained). For each:
spans/s answered 200, and spans/s into the landing zone (the spans answered ÷ the window plus the
time the receiver takes to stop); for the sustained run also the spool bytes not yet handed over
when the senders stop, p99 request latency and the receiver's peak RSS. Then the ingest side's
conversion of the sustained run's segments (:func:`convert_pending`, as ``strata ingest`` runs it
first), timed alone: spans/s per core of CPU, and whether every span answered 200 is in the
converted files. The baseline is the same HTTP server (uvicorn, same options) with an ASGI app
that appends each body to a file, fsyncs it and answers 200 — no parsing, no segments — run before
and after ours and averaged. Target:
at least 0.7× its throughput, on the request path and sustained.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import Measurement, scaled

SENDERS = 4
SPANS = 50
SECONDS = scaled(8.0, 1.0)
BASELINE = "uvicorn, same options: append the body + fsync, no parsing"


def _bodies(sender: int, count: int = 16) -> list[bytes]:
    """Protobuf export requests of ``SPANS`` GenAI spans each, distinct ids per body."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    bodies = []
    for b in range(count):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        for key, value in (("service.name", "gateway"), ("tenant.id", f"t{sender}")):
            resource_spans.resource.attributes.add(key=key).value.string_value = value
        spans = resource_spans.scope_spans.add(scope={"name": "opentelemetry.instrumentation.openai_v2"}).spans
        for i in range(SPANS):
            n = (sender << 40) | (b << 20) | i
            span = spans.add(
                trace_id=n.to_bytes(16, "big"),
                span_id=(n + 1).to_bytes(8, "big"),
                name="chat gpt-4o",
                kind=3,
                start_time_unix_nano=1_770_000_000_000_000_000 + n,
                end_time_unix_nano=1_770_000_000_900_000_000 + n,
            )
            for key, value in (
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.request.model", "gpt-4o"),
                ("gen_ai.response.model", "gpt-4o-2024-08-06"),
                ("gen_ai.provider.name", "openai"),
                ("gen_ai.response.id", f"chatcmpl-{n:x}"),
                ("user.id", f"u{i % 97}"),
            ):
                span.attributes.add(key=key).value.string_value = value
            for key, value in (("gen_ai.usage.input_tokens", 812), ("gen_ai.usage.output_tokens", 96)):
                span.attributes.add(key=key).value.int_value = value
            span.attributes.add(key="gen_ai.response.finish_reasons").value.array_value.values.add(string_value="stop")
        bodies.append(request.SerializeToString())
    return bodies


def _send(sender: int, port: int, start: float, stop: float, results: multiprocessing.Queue) -> None:
    bodies = _bodies(sender)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    acked, acked_bytes, refused, latencies = 0, 0, 0, []
    while time.time() < start:
        time.sleep(0.001)
    i = 0
    while time.time() < stop:
        began = time.perf_counter()
        try:
            conn.request(
                "POST", "/v1/traces", body=bodies[i % len(bodies)], headers={"Content-Type": "application/x-protobuf"}
            )
            response = conn.getresponse()
            response.read()
            ok = response.status == 200
        except OSError:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            ok = False
        latencies.append(time.perf_counter() - began)
        if ok:
            acked += 1
            acked_bytes += len(bodies[i % len(bodies)])
            i += 1
        else:
            refused += 1
            time.sleep(0.05)
    results.put((acked, acked_bytes, refused, latencies))


def _peak_rss(pid: int, done: threading.Event, peak: list[int]) -> None:
    import psutil

    process = psutil.Process(pid)
    while not done.is_set():
        try:  # with --workers the receiver is a supervisor and its worker processes
            family = [process, *process.children(recursive=True)]
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in family))
        except psutil.Error:
            return
        done.wait(0.05)


@dataclass(frozen=True)
class _Load:
    acked: int
    acked_bytes: int
    latencies: list[float]
    peak_rss: int
    #: Bytes under the spool folder when the senders stop (not yet handed to the landing zone).
    spooled: int
    #: Seconds from SIGTERM to the server's exit: what it still had to write and hand over.
    stop_s: float


def _load(server: subprocess.Popen, port: int, spool: Path | None = None) -> _Load:
    """What SENDERS senders for SECONDS get from a server, and what it holds when they stop."""
    _wait_for_port(port, server)
    done, peak = threading.Event(), [0]
    watcher = threading.Thread(target=_peak_rss, args=(server.pid, done, peak), daemon=True)
    watcher.start()
    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue = context.Queue()
    start = time.time() + 1.5  # every sender has built its bodies
    senders = [context.Process(target=_send, args=(s, port, start, start + SECONDS, results)) for s in range(SENDERS)]
    for process in senders:
        process.start()
    outcomes = [results.get(timeout=SECONDS + 60) for _ in senders]
    for process in senders:
        process.join()
    spooled = sum(p.stat().st_size for p in spool.rglob("*") if p.is_file()) if spool and spool.exists() else 0
    stopping = time.perf_counter()
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=120)
    stop_s = time.perf_counter() - stopping
    done.set()
    latencies = sorted(t for *_, lat in outcomes for t in lat)
    return _Load(sum(o[0] for o in outcomes), sum(o[1] for o in outcomes), latencies, peak[0], spooled, stop_s)


def _mean(a: _Load, b: _Load) -> _Load:
    """Two runs of one server as one: counts and times averaged, latencies pooled, the higher peak."""
    return _Load(
        (a.acked + b.acked) // 2,
        (a.acked_bytes + b.acked_bytes) // 2,
        sorted(a.latencies + b.latencies),
        max(a.peak_rss, b.peak_rss),
        (a.spooled + b.spooled) // 2,
        (a.stop_s + b.stop_s) / 2,
    )


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_BASELINE_APP = """
import asyncio, os, sys, uvicorn
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
def append(body):
    os.write(fd, body)
    os.fdatasync(fd)
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    chunks, more = [], True
    while more:
        event = await receive()
        chunks.append(event.get("body", b""))
        more = event.get("more_body", False)
    await asyncio.to_thread(append, b"".join(chunks))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf"), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), lifespan="off", log_level="warning", access_log=False,
            server_header=False, limit_concurrency=512)
"""


def _landed_spans(landing: Path) -> int:
    return sum(
        len(scope.get("spans", ()))
        for path in landing.rglob("*.otlp.jsonl")
        for line in path.read_bytes().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for scope in rs["scopeSpans"]
    )


@dataclass(frozen=True)
class _Conversion:
    spans: int
    #: CPU seconds of the conversion (one thread: core-seconds), and its wall-clock seconds.
    cpu_s: float
    wall_s: float


def _convert(landing: Path) -> _Conversion:
    """The ingest side's first step on a run's landing zone: its segments converted, timed, then counted."""
    from warehouse.sources.collector.segments import convert_pending

    began, cpu = time.perf_counter(), time.process_time()
    done = convert_pending([landing])
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - began
    if done.failed:
        raise AssertionError(f"segments not converted: {done.failed}")
    return _Conversion(_landed_spans(landing), cpu_s, wall_s)


def _ours(home: Path, env: dict[str, str], segment_seconds: str, segment_bytes: str) -> tuple[_Load, _Conversion]:
    """A run of ``strata collect`` with these segments, and the conversion of what it handed over."""
    port = _free_port()
    env = {
        **env,
        "STRATA_HOME": str(home),
        "STRATA_COLLECT_SEGMENT_SECONDS": segment_seconds,
        "STRATA_COLLECT_SEGMENT_BYTES": segment_bytes,
        "STRATA_COLLECT_SPOOL_MAX_BYTES": str(8 << 30),
    }
    load = _load(
        subprocess.Popen(
            [sys.executable, "-m", "strata", "collect", "--port", str(port)], env=env, stdout=subprocess.DEVNULL
        ),
        port,
        home / "collect" / "spool",
    )
    if list((home / "collect" / "spool").rglob("*.otlp.spool")):
        raise AssertionError("the receiver stopped with segments it did not hand over")
    conversion = _convert(home / "landing" / "otlp")
    if conversion.spans < load.acked * SPANS:
        raise AssertionError(f"{load.acked * SPANS} spans answered 200, only {conversion.spans} in the landing zone")
    return load, conversion


def run(workdir: Path) -> list[Measurement]:
    env = {**os.environ, "STRATA_PSEUDONYM_KEY": "bench-key-not-a-secret-0123"}
    env.pop("STRATA_LANDING_DIR", None)
    baseline_file = workdir / "baseline.bin"
    # The baseline brackets our two runs (before and after, averaged), so a change of the machine's load
    # during the run tilts the ratios less.
    before = _baseline(workdir, env, baseline_file)
    # The request path alone: no segment closes in the window; it is handed over at the stop.
    deferred, _ = _ours(workdir / "deferred", env, "3600", str(8 << 30))
    # Sustained: segments close every second and are handed over (renamed) meanwhile.
    ours, conversion = _ours(workdir / "sustained", env, "1", str(64 << 20))
    after = _baseline(workdir, env, baseline_file)
    base = _mean(before, after)
    baseline_share = baseline_file.stat().st_size / (before.acked_bytes + after.acked_bytes)
    return _request_path(deferred, base) + _sustained(ours, base) + _ingest_side(conversion, ours, baseline_share)


def _baseline(workdir: Path, env: dict[str, str], baseline_file: Path) -> _Load:
    """The senders against the bare ASGI app appending each body to ``baseline_file``."""
    port = _free_port()
    server = [sys.executable, "-c", _BASELINE_APP, str(baseline_file), str(port)]
    return _load(subprocess.Popen(server, env={**env, "STRATA_HOME": str(workdir / "base")}), port)


def _p99(latencies: list[float]) -> float:
    return latencies[int(0.99 * (len(latencies) - 1))] * 1000


def _spans_per_s(load: _Load) -> float:
    return load.acked * SPANS / SECONDS


def _through(load: _Load) -> float:
    """Spans/s into the landing zone: the window and the stop."""
    return load.acked * SPANS / (SECONDS + load.stop_s)


def _answered(run: str, ours: _Load, base: _Load) -> list[Measurement]:
    """A run's spans/s answered 200 and into the landing zone, against the baseline's."""
    return [
        Measurement(
            f"spans/s answered 200, {run}",
            _spans_per_s(ours),
            "spans/s",
            BASELINE,
            _spans_per_s(base),
            target_ratio=0.7,
        ),
        Measurement(
            "… and into the landing zone (answered ÷ window + the stop)",
            _through(ours),
            "spans/s",
            BASELINE,
            _through(base),
        ),
    ]


def _request_path(deferred: _Load, base: _Load) -> list[Measurement]:
    """The run whose one segment is handed over at the stop, against the baseline."""
    label = f"{SENDERS} senders × {SECONDS:g} s, {SPANS}-span protobuf requests"
    return [
        *_answered(f"request path alone: one segment, handed over at the stop ({label})", deferred, base),
        Measurement(
            "… p99 request latency",
            _p99(deferred.latencies),
            "ms",
            BASELINE,
            _p99(base.latencies),
            higher_is_better=False,
        ),
    ]


def _sustained(ours: _Load, base: _Load) -> list[Measurement]:
    """The run rolling 1 s segments and handing them over meanwhile, against the baseline."""
    return [
        *_answered("sustained: 1 s segments rolled and handed over meanwhile", ours, base),
        Measurement(
            "… spool not yet handed over when the senders stop",
            ours.spooled / 2**20,
            "MiB",
            BASELINE + " (none)",
            0.0,
            higher_is_better=False,
        ),
        Measurement(
            "p99 request latency, sustained",
            _p99(ours.latencies),
            "ms",
            BASELINE,
            _p99(base.latencies),
            higher_is_better=False,
        ),
        Measurement(
            "peak RSS of the receiver, sustained",
            ours.peak_rss / 2**20,
            "MiB",
            BASELINE,
            base.peak_rss / 2**20,
            higher_is_better=False,
        ),
    ]


def _ingest_side(conversion: _Conversion, ours: _Load, baseline_share: float) -> list[Measurement]:
    """The conversion of the sustained run's segments: its speed against the intake, and whether every span
    answered 200 is in its files (the baseline: the share of the bytes answered in its file)."""
    return [
        Measurement(
            "ingest side: the sustained run's segments converted to OTLP/JSON lines, per core of CPU",
            conversion.spans / conversion.cpu_s,
            "spans/s",
            "the receiver's intake, sustained (spans/s answered 200)",
            _spans_per_s(ours),
        ),
        Measurement(
            "… the same, wall clock (the conversion alone, one process)",
            conversion.spans / conversion.wall_s,
            "spans/s",
            "the receiver's intake, sustained (spans/s answered 200)",
            _spans_per_s(ours),
        ),
        Measurement(
            "share of the spans answered 200 in the converted files, sustained",
            conversion.spans / (ours.acked * SPANS),
            "",
            BASELINE + " (bytes in its file)",
            baseline_share,
            target_ratio=1.0,
        ),
    ]
