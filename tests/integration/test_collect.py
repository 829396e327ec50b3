"""``strata collect``: what the real OpenTelemetry exporter sends lands in ODS as OTLP/JSON, the
answers follow OTLP/HTTP, and nothing answered 200 is lost when the receiver, or the ingest that
converts its segments, is killed."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import http.client
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl
from collect_server import free_port, receiver_thread, start_cli
from fixtures_otlp import otlp_export_line

from warehouse.dwd.build import build
from warehouse.ods.ingest import ingest
from warehouse.settings import load_settings
from warehouse.sources.collector.encoding import JSON, PROTOBUF, accept, decode
from warehouse.sources.collector.segments import convert_pending, frame
from warehouse.storage.lake import Lake
from warehouse.tables import table

DAY = dt.date(2026, 2, 2)


def _post(
    url: str,
    body: bytes,
    content_type: str = "application/json",
    path: str = "/v1/traces",
    method: str = "POST",
    **headers: str,
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": content_type, **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _records(prefix: str, n: int) -> list[dict]:
    return [
        {
            "request_id": f"{prefix}-{i}",
            "ts": dt.datetime(2026, 2, 2, 8, 0, i % 60, tzinfo=dt.UTC),
            "duration_ms": 120,
            "tenant_id": "t1",
            "user_id": "bob",
            "operation": "chat",
            "model": "m1",
            "input_tokens": 10,
            "output_tokens": 5,
            "status_code": 200,
        }
        for i in range(n)
    ]


def _segments(settings) -> list[Path]:
    """The segments handed to the landing zone, not yet converted."""
    return sorted((settings.landing_dir / "otlp").rglob("*.otlp.spool"))


def _landed(settings) -> list[Path]:
    """The landing zone's OTLP/JSON lines files, once its segments are converted (as an ingest does first)."""
    assert not convert_pending([settings.landing_dir]).failed
    return sorted((settings.landing_dir / "otlp").rglob("*.otlp.jsonl"))


def test_the_sdk_exporters_protobuf_lands_in_ods_byte_exact_and_reads_into_dwd(strata_env: Path) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    with receiver_thread() as url:
        for compression in (Compression.NoCompression, Compression.Gzip):
            provider = TracerProvider(resource=Resource.create({"service.name": "gateway", "tenant.id": "t1"}))
            exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", compression=compression)
            results: list[SpanExportResult] = []
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            real_export = exporter.export

            def export(spans, results=results, real_export=real_export):  # this iteration's, bound now
                results.append(real_export(spans))
                return results[-1]

            exporter.export = export  # type: ignore[method-assign]
            with provider.get_tracer("app").start_as_current_span("chat m1") as span:
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "m1",
                        "gen_ai.response.id": f"resp-{compression.value}",
                        "gen_ai.usage.input_tokens": 10,
                        "gen_ai.usage.output_tokens": 5,
                    }
                )
            provider.shutdown()
            assert results == [SpanExportResult.SUCCESS]
        # a JSON body, pretty-printed: kept as sent, on one line
        status, _, answer = _post(url, json.dumps(json.loads(otlp_export_line(_records("json", 1))), indent=1).encode())
        assert (status, answer) == (200, b"{}")
    settings = load_settings()
    [segment] = _segments(settings)  # handed over unparsed: the ingest converts it
    report = ingest(settings, [settings.landing_dir])
    assert [f.source for f in report.landed] == ["otlp-json"] and not segment.exists()
    assert report.landed[0].path == segment.with_name(segment.name.replace(".otlp.spool", ".otlp.jsonl"))
    lines = report.landed[0].path.read_bytes().splitlines()
    assert len(lines) == 3 and all(b"\n" not in line for line in lines)
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw"))).sort("line_no")
    assert ods.get_column("raw_line").to_list() == lines
    converted = [json.loads(line)["resourceSpans"][0] for line in lines[:2]]
    for resource_spans in converted:
        assert {"key": "strata.converted_from", "value": {"stringValue": "protobuf"}} in resource_spans["resource"][
            "attributes"
        ]
        span = resource_spans["scopeSpans"][0]["spans"][0]
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16) and len(span["spanId"]) == 16
    today = dt.datetime.now(dt.UTC).date()
    build(Lake(settings), "requests", today)
    ids = pl.from_arrow(Lake(settings).read(table("dwd.request"))).get_column("request_id").to_list()
    assert sorted(ids) == ["resp-gzip", "resp-none"]


def test_the_answers_follow_otlp_http(strata_env: Path, tmp_path: Path) -> None:
    from google.rpc.status_pb2 import Status

    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-acme-0123456789 acme\n")
    tokens.chmod(0o600)
    body = otlp_export_line([{**r, "tenant_id": None} for r in _records("a", 3)])
    with receiver_thread(
        STRATA_COLLECT_MAX_BODY_BYTES=str(64 << 10),
        STRATA_COLLECT_TOKENS_FILE=str(tokens),
        STRATA_COLLECT_SPOOL_MAX_BYTES=str(2 * len(body)),
        STRATA_COLLECT_SEGMENT_SECONDS="3600",
    ) as url:
        auth = {"Authorization": "Bearer token-of-acme-0123456789"}
        assert _post(url, body)[0] == 401
        assert _post(url, body, Authorization="Bearer token-of-acme-012345678X")[0] == 401
        for signal_path in ("/v1/logs", "/v1/metrics"):
            status, _, answer = _post(url, b"{}", path=signal_path, **auth)
            assert status == 404 and "not received yet" in json.loads(answer)["message"]
        assert _post(url, b"", method="GET", **auth)[:2][0] == 405
        assert _post(url, body, "text/plain", **auth)[0] == 415
        assert _post(url, body, **{"Content-Encoding": "br"}, **auth)[0] == 415
        status, headers, answer = _post(url, b"\x0a\xff", "application/x-protobuf", **auth)
        assert status == 400 and headers["content-type"] == "application/x-protobuf"
        assert "protobuf" in Status.FromString(answer).message
        assert _post(url, b"{broken", **auth)[0] == 400
        # the limit is on the decompressed body: 1 KiB of gzip that inflates past 64 KiB
        bomb = gzip.compress(b'{"resourceSpans":[], "pad": "' + b" " * (100 << 10) + b'"}')
        assert len(bomb) < 1024 and _post(url, bomb, **{"Content-Encoding": "gzip"}, **auth)[0] == 413
        assert _post(url, b" " * (65 << 10), **auth)[0] == 413
        # gzip may come in several members (concatenated streams): all of them count
        members = gzip.compress(b'{"resourceSpans": [') + gzip.compress(b"]}")
        assert _post(url, members, **{"Content-Encoding": "gzip"}, **auth)[:3:2] == (200, b"{}")
        assert _post(url, gzip.compress(body)[:-9], **{"Content-Encoding": "gzip"}, **auth)[0] == 400
        # a token's tenant: stamped on the resource; a span claiming another tenant is rejected
        other = otlp_export_line([{**_records("b", 1)[0], "tenant_id": "mallory"}])
        status, _, answer = _post(url, other, **auth)
        assert status == 200 and json.loads(answer)["partialSuccess"]["rejectedSpans"] == "1"
        assert [_post(url, body, **auth)[:3:2] for _ in range(2)] == [(200, b"{}")] * 2
        status, headers, _ = _post(url, body, **auth)  # the spool holds its bound: backpressure
        assert status == 503 and int(headers["retry-after"]) > 0
    [segment] = _landed(load_settings())
    lines = [json.loads(line) for line in segment.read_bytes().splitlines()]
    assert len(lines) == 2
    assert all(
        {"key": "strata.tenant_id", "value": {"stringValue": "acme"}} in rs["resource"]["attributes"]
        for line in lines
        for rs in line["resourceSpans"]
    )


def test_a_restarted_receiver_hands_over_what_a_killed_one_left_cut_to_whole_records(strata_env: Path) -> None:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    settings = load_settings()
    spool = settings.home / "collect" / "spool" / "date=2026-02-02"
    spool.mkdir(parents=True)
    line = otlp_export_line(_records("json", 1))
    request = json.loads(otlp_export_line([{**r, "tenant_id": None} for r in _records("pb", 1)]))
    for span in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # protobuf's JSON mapping: base64 ids
        span.update(traceId=base64.b64encode(b"\x01" * 16).decode(), spanId=base64.b64encode(b"\x02" * 8).decode())
    protobuf = ParseDict(request, ExportTraceServiceRequest()).SerializeToString()
    records = [accept(line, JSON, None).record, accept(protobuf, PROTOBUF, "acme").record]
    acknowledged = b"".join(frame(r) for r in records if r)
    (spool / "collect-gone-1-deadbeef-000001.otlp.spool").write_bytes(acknowledged + frame(b"Lcut off")[:-3])
    (spool / "collect-gone-1-deadbeef-000002.otlp.spool").write_bytes(frame(b"L{}")[:5])  # nothing acknowledged
    (spool / "collect-gone-1-deadbeef-000003.otlp.spool.new").write_bytes(b"")  # created, never named
    with receiver_thread():
        pass
    [handed] = _segments(settings)
    assert handed.read_bytes() == acknowledged  # as it was, cut to its last whole record, unparsed
    [landed] = _landed(settings)
    assert (
        landed.relative_to(settings.landing_dir).as_posix()
        == "otlp/date=2026-02-02/collect-gone-1-deadbeef-000001.otlp.jsonl"
    )
    assert landed.read_bytes().splitlines() == [line, decode(protobuf, PROTOBUF, "acme").line]
    assert b'"strata.converted_from"' in landed.read_bytes() and not list(spool.iterdir())


class _Sender(threading.Thread):
    """Sends its requests until each was answered 200, retrying the others as exporters do."""

    def __init__(self, port: int, bodies: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.port, self.bodies, self.acked = port, bodies, [False] * len(bodies)
        self.sends = 0

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while not all(self.acked) and time.monotonic() < deadline:
            for i, body in enumerate(self.bodies):
                if self.acked[i]:
                    continue
                self.sends += 1
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                    conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/json"})
                    self.acked[i] = conn.getresponse().status == 200
                    conn.close()
                except OSError:
                    time.sleep(0.02)  # refused or cut off: the receiver is down; retry


def test_sigkill_loses_no_span_answered_200_and_a_resent_span_is_a_duplicate(strata_env: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {"STRATA_COLLECT_SEGMENT_SECONDS": "0.3"}
    senders = [_Sender(port, [otlp_export_line(_records(f"s{s}-r{r}", 5)) for r in range(60)]) for s in range(4)]
    receiver = start_cli(port, env, tmp_path / "collect.log")
    for sender in senders:
        sender.start()
    deadline = time.monotonic() + 60
    while sum(sum(s.acked) for s in senders) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    receiver.send_signal(signal.SIGKILL)
    receiver.wait()
    acked_before_kill = sum(sum(s.acked) for s in senders)
    time.sleep(0.3)  # senders meet a closed port meanwhile
    receiver = start_cli(port, env, tmp_path / "collect.log")
    for sender in senders:
        sender.join(timeout=90)
    # an answer lost on the way back: the exporter sends the same batch again
    resent = _Sender(port, [senders[0].bodies[0]])
    resent.run()
    receiver.send_signal(signal.SIGTERM)  # a graceful stop lands the open segment (uvicorn then re-raises it)
    assert receiver.wait(timeout=60) in (0, -signal.SIGTERM)
    assert all(all(s.acked) for s in senders) and acked_before_kill < 240
    settings = load_settings()
    stored = [
        span["attributes"][0]["value"]["stringValue"]
        for path in _landed(settings)
        for line in path.read_bytes().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for scope in rs["scopeSpans"]
        for span in scope["spans"]
    ]
    assert len(stored) > 1200 and not list((settings.home / "collect" / "spool").rglob("*.otlp.spool*"))
    assert not _segments(settings)
    ingest(settings, [settings.landing_dir])
    report = build(Lake(settings), "requests", DAY)
    ids = pl.from_arrow(Lake(settings).read(table("dwd.request"))).get_column("request_id")
    assert ids.len() == ids.n_unique() == 1200  # every span answered 200, once
    assert report.books.duplicates == len(stored) - 1200 >= 5


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_the_cli_serves_https_with_tokens_and_refuses_a_tokens_file_others_can_read(
    strata_env: Path, tmp_path: Path
) -> None:
    import ssl
    import subprocess
    import sys

    tokens = tmp_path / "tokens"
    tokens.write_text("token-of-acme-0123456789 acme\n")
    tokens.chmod(0o644)
    refused = subprocess.run(
        [sys.executable, "-m", "strata", "collect"],
        capture_output=True,
        text=True,
        env={**os.environ, "STRATA_COLLECT_TOKENS_FILE": str(tokens)},
    )
    assert refused.returncode == 1 and "chmod 600" in refused.stderr and refused.stdout == ""  # no address yet
    assert "token-of-acme" not in refused.stdout + refused.stderr
    tokens.chmod(0o600)
    cert, key = _self_signed(tmp_path)
    port = free_port()
    receiver = start_cli(
        port,
        {
            "STRATA_COLLECT_TOKENS_FILE": str(tokens),
            "STRATA_COLLECT_TLS_CERT": str(cert),
            "STRATA_COLLECT_TLS_KEY": str(key),
        },
        tmp_path / "collect.log",
    )
    try:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=30, context=ssl.create_default_context(cafile=str(cert))
        )
        conn.request(
            "POST",
            "/v1/traces",
            body=otlp_export_line([{**_records("tls", 1)[0], "tenant_id": None}]),
            headers={"Content-Type": "application/json", "Authorization": "Bearer token-of-acme-0123456789"},
        )
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        receiver.send_signal(signal.SIGTERM)
        receiver.wait(timeout=60)
    [segment] = _landed(load_settings())
    assert b'"strata.tenant_id","value":{"stringValue":"acme"}' in segment.read_bytes()


def test_a_port_in_use_is_one_error_line_naming_it_before_any_address_is_printed(strata_env: Path) -> None:
    """It printed its address, then ended with uvicorn's `[Errno 98]` lines and exit code 3."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        busy = subprocess.run(
            [sys.executable, "-m", "strata", "collect", "--port", str(port)],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "80"},
            timeout=60,
        )
    assert busy.returncode == 1 and busy.stdout == "", busy.stdout + busy.stderr
    assert busy.stderr == (
        f"error: port {port} of 127.0.0.1 is in use by another process (a strata collect already running?): "
        "stop it, or set another port in STRATA_COLLECT_PORT (--port)\n"
    )


def test_receivers_sharing_a_spool_leave_each_others_open_segments_alone(strata_env: Path) -> None:
    settings = load_settings()
    body = otlp_export_line(_records("shared", 2))
    with receiver_thread(STRATA_COLLECT_SEGMENT_SECONDS="3600") as first:
        assert _post(first, body)[0] == 200
        with receiver_thread() as second:  # its start-up recovery finds the first one's open segment, locked
            assert _post(second, body)[0] == 200
        assert (
            len(_segments(settings)) == 1
            and len(list((settings.home / "collect" / "spool").rglob("*.otlp.spool"))) == 1
        )
    landed = _landed(settings)
    assert len(landed) == 2 and len({p.name for p in landed}) == 2
    assert [p.read_bytes() for p in landed] == [body + b"\n"] * 2


_KILLED_AFTER_CONVERTING = """
import os, pathlib, signal, sys
from warehouse.ods.ingest import ingest
from warehouse.settings import load_settings

real_unlink = pathlib.Path.unlink

def unlink(self, missing_ok=False):
    if self.name.endswith(".otlp.spool"):  # its converted file is renamed into place and synced: die now
        os.kill(os.getpid(), signal.SIGKILL)
    real_unlink(self, missing_ok)

pathlib.Path.unlink = unlink
ingest(load_settings(), [pathlib.Path(sys.argv[1])])
"""


def test_an_ingest_killed_between_converting_a_segment_and_deleting_it_lands_every_span_once(
    strata_env: Path,
) -> None:
    settings = load_settings()
    with receiver_thread(STRATA_COLLECT_SEGMENT_SECONDS="0.2") as url:
        for r in range(6):
            assert _post(url, otlp_export_line(_records(f"k{r}", 5)))[0] == 200
            time.sleep(0.1)
    segments = _segments(settings)
    assert len(segments) >= 2
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_CONVERTING, str(settings.landing_dir)], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    first = segments[0].with_name(segments[0].name.replace(".otlp.spool", ".otlp.jsonl"))
    assert segments[0].exists() and first.exists()  # both: converted, not yet deleted, nothing landed
    assert Lake(settings).open_table(table("ods.request_log_raw")) is None
    report = ingest(settings, [settings.landing_dir])
    assert not _segments(settings) and not report.failed
    assert sorted(f.path for f in report.landed) == [
        s.with_name(s.name.replace(".otlp.spool", ".otlp.jsonl")) for s in segments
    ]
    assert not ingest(settings, [settings.landing_dir]).landed  # a re-run finds nothing new
    build(Lake(settings), "requests", DAY)
    ids = pl.from_arrow(Lake(settings).read(table("dwd.request"))).get_column("request_id")
    assert ids.len() == ids.n_unique() == 30  # every span, once


def _snake_keys(value: object) -> object:
    """A JSON document with every object key in its proto spelling (``resourceSpans`` → ``resource_spans``)."""
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    if isinstance(value, dict):
        return {"".join(f"_{c.lower()}" if c.isupper() else c for c in k): _snake_keys(v) for k, v in value.items()}
    return value


def _spellings(prefix: str) -> dict[str, bytes]:
    """One export (three spans, two resources) in each spelling a decoder takes; ids `<spelling>-<prefix>-<i>`."""
    bodies = {}
    for spelling in ("camel", "legacy", "snake", "mixed"):
        records = [{**r, "tenant_id": None, "server": f"s{i % 2}"} for i, r in enumerate(_records("", 3))]
        doc = json.loads(
            otlp_export_line([{**r, "request_id": f"{spelling}-{prefix}{r['request_id']}"} for r in records])
        )
        if spelling == "legacy":
            for rs in doc["resourceSpans"]:
                rs["instrumentationLibrarySpans"] = rs.pop("scopeSpans")
        elif spelling == "snake":
            doc = _snake_keys(doc)
        elif spelling == "mixed":  # proto names at the top and on the spans, JSON names between
            doc = {"resource_spans": doc["resourceSpans"]}
            for rs in doc["resource_spans"]:
                rs["scopeSpans"][0]["spans"] = [
                    {**_snake_keys({k: v for k, v in s.items() if k != "attributes"}), "attributes": s["attributes"]}
                    for s in rs["scopeSpans"][0]["spans"]
                ]
        bodies[spelling] = json.dumps(doc).encode()
    return bodies


def test_every_spelling_of_an_export_lands_span_for_span_and_what_is_no_export_is_refused(
    strata_env: Path, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("token-without-tenant-0123 \ntoken-of-acme-0123456789 acme\n")
    tokens.chmod(0o600)
    auths = {"open": "Bearer token-without-tenant-0123", "acme": "Bearer token-of-acme-0123456789"}
    camel = _spellings("x")["camel"]
    deep = b'{"resourceSpans":' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    both = json.loads(camel)
    both["resource_spans"] = both["resourceSpans"][:1]
    legacy_too = json.loads(camel)
    legacy_too["resourceSpans"][0]["instrumentationLibrarySpans"] = legacy_too["resourceSpans"][0]["scopeSpans"]
    workflow = _snake_keys(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "plan"}]}]}]}
    )
    parent_alone = json.dumps(workflow).encode()
    # Broken below the walk: the reader would keep each as one malformed line, so none may be answered 2xx.
    value_not_scalar, scope_not_object = json.loads(camel), json.loads(camel)
    value_not_scalar["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"] = {
        "stringValue": {"a": 1}
    }
    scope_not_object["resourceSpans"][0]["scopeSpans"][0]["scope"] = 5
    deeper = [json.dumps(value_not_scalar).encode(), json.dumps(scope_not_object).encode()]
    with receiver_thread(STRATA_COLLECT_TOKENS_FILE=str(tokens), STRATA_COLLECT_SEGMENT_SECONDS="3600") as url:
        for name, auth in auths.items():
            for body in (json.dumps(both).encode(), json.dumps(legacy_too).encode()):
                status, _, answer = _post(url, body, Authorization=auth)
                assert status == 400 and "spelled two ways" in json.loads(answer)["message"]
            for body in (b"{broken", b"[1]", b"3", b'"resourceSpans"', deep, *deeper):
                assert _post(url, body, Authorization=auth)[0] == 400, (name, body[:20])
            for spelling, body in _spellings(name).items():
                assert _post(url, body, Authorization=auth)[:3:2] == (200, b"{}"), (name, spelling)
        assert _post(url, parent_alone, Authorization=auths["open"])[:3:2] == (200, b"{}")
    settings = load_settings()
    (settings.landing_dir / "otlp").mkdir(parents=True, exist_ok=True)
    (settings.landing_dir / "otlp" / "deep.otlp.jsonl").write_bytes(deep + b"\n" + camel + b"\n")
    report = ingest(settings, [settings.landing_dir])
    assert not report.failed
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert parent_alone in ods.get_column("raw_line").to_list()
    assert ods.filter(pl.col("raw_line") == deep).select("is_malformed", "parse_error").rows() == [
        (True, "invalid JSON")
    ]
    build(Lake(settings), "requests", DAY)
    dwd = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    # every column but those naming the request or where its line lies
    compared = [c for c in dwd.columns if c not in ("request_id", "span_id", "attributes", "source_file", "line_no")]
    rows = {}
    for spelling in ("camel", "legacy", "snake", "mixed"):
        for name in auths:
            landed = dwd.filter(pl.col("request_id").str.starts_with(f"{spelling}-{name}"))
            rows[spelling, name] = (
                landed.with_columns(pl.col("request_id").str.split("-").list.last())
                .select("request_id", *compared)
                .sort("request_id")
                .rows()
            )
    for (spelling, name), landed in rows.items():
        assert len(landed) == 3 and landed == rows["camel", name], (spelling, name)
    assert {r[compared.index("tenant_id") + 1] for r in rows["camel", "acme"]} == {"acme"}
