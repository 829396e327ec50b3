"""``strata collect`` as a server: connections that never finish their headers or bodies, workers whose master dies."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import resource
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psutil
import pytest
from collect_server import free_port, receiver_thread, start_cli
from fixtures_otlp import otlp_export_line

from warehouse.ods.ingest import ingest
from warehouse.settings import load_settings
from warehouse.sources.collector import receiver
from warehouse.sources.collector.spool import segments_held, spool_dir
from warehouse.storage.lake import Lake
from warehouse.tables import table

HALF_OPEN = 600
TOKEN = "token-of-acme-0123456789"


def _body(request_id: str) -> bytes:
    record = {"request_id": request_id, "ts": dt.datetime(2026, 2, 2, 8, tzinfo=dt.UTC), "tenant_id": "t1"}
    return otlp_export_line([{**record, "operation": "chat", "model": "m1"}])


def _post(port: int, body: bytes, timeout: float, **headers: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@contextlib.contextmanager
def _files_open(count: int) -> Iterator[None]:
    """This process (and what it starts) may open ``count`` more files than it has open now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, soft + count)), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _closed_by_peer(sockets: list[socket.socket], deadline: float) -> int:
    """How many of ``sockets`` the other end closes before ``deadline`` (monotonic)."""
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while closed < len(sockets) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                try:
                    data = key.fileobj.recv(4096)  # type: ignore[union-attr]
                except ConnectionResetError:
                    data = b""
                if not data:
                    selector.unregister(key.fileobj)
                    closed += 1
    return closed


def test_silent_half_open_connections_neither_starve_senders_nor_stay_open(strata_env: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} acme\n")
    tokens.chmod(0o600)
    port = free_port()
    half_open: list[socket.socket] = []
    with _files_open(4 * HALF_OPEN):
        receiver = start_cli(port, {"STRATA_COLLECT_TOKENS_FILE": str(tokens)}, tmp_path / "collect.log")
        try:
            opened = time.monotonic()
            for _ in range(HALF_OPEN):
                half_open.append(socket.create_connection(("127.0.0.1", port)))
                half_open[-1].sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
            # an authenticated sender, from now until 10 s after they opened, is answered 200 within 2 s
            answered = []
            while not answered and time.monotonic() < opened + 10:
                began = time.monotonic()
                with contextlib.suppress(OSError):  # over 2 s: a timeout
                    if _post(port, _body("sender"), 2.0, Authorization=f"Bearer {TOKEN}") == 200:
                        answered.append(began - opened)
                time.sleep(0.2)
            assert answered, "no sender answered 200 within 2 s while the half-open connections were open"
            assert _closed_by_peer(half_open, opened + 10) == HALF_OPEN
        finally:
            for sock in half_open:
                sock.close()
            receiver.send_signal(signal.SIGTERM)
            receiver.wait(timeout=60)


def test_idle_kept_alive_connections_do_not_starve_senders(strata_env: Path, tmp_path: Path) -> None:
    port = free_port()
    idle: list[http.client.HTTPConnection] = []
    with _files_open(4 * HALF_OPEN):
        receiver = start_cli(port, {}, tmp_path / "collect.log")
        try:
            for _ in range(HALF_OPEN):  # each asks for something (404), then keeps its connection, silent
                idle.append(http.client.HTTPConnection("127.0.0.1", port, timeout=30))
                idle[-1].request("GET", "/")
                idle[-1].getresponse().read()
            assert _post(port, _body("sender"), 2.0) == 200
        finally:
            for conn in idle:
                conn.close()
            receiver.send_signal(signal.SIGTERM)
            receiver.wait(timeout=60)


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # exited; its new parent has not reaped it yet
    except psutil.NoSuchProcess:
        return True


def test_workers_die_with_a_killed_master_handing_over_every_span_answered_200(
    strata_env: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = {"STRATA_COLLECT_SEGMENT_SECONDS": "3600"}  # the segments are open when the master dies
    master = start_cli(port, env, tmp_path / "collect.log", workers=2)
    bodies = [_body(f"w{i}") for i in range(40)]
    for body in bodies:
        assert _post(port, body, 30.0) == 200
    children = psutil.Process(master.pid).children(recursive=True)
    workers = [p for p in children if "resource_tracker" not in " ".join(p.cmdline())]
    assert len(workers) == 2
    master.send_signal(signal.SIGKILL)
    master.wait()
    killed = time.monotonic()
    try:
        while not all(_gone(p) for p in children) and time.monotonic() < killed + 10:
            time.sleep(0.05)
        assert [p.pid for p in children if not _gone(p)] == []
    finally:  # what outlived the master must not outlive the test
        for process in children:
            with contextlib.suppress(psutil.Error):
                process.kill()
    settings = load_settings()
    assert segments_held(spool_dir(settings.home)) == 0  # the workers handed their open segments over
    restarted = start_cli(port, env, tmp_path / "collect.log")  # the port is free
    assert time.monotonic() - killed < 10
    restarted.send_signal(signal.SIGTERM)
    restarted.wait(timeout=60)
    ingest(settings, [settings.landing_dir])
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert sorted(ods.get_column("raw_line").to_list()) == sorted(bodies)


def test_a_body_that_stops_arriving_is_answered_408_and_closed(
    strata_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(receiver, "BODY_IDLE_S", 0.5)
    with receiver_thread() as url:
        port = int(url.rsplit(":", 1)[1])
        stalled = []
        for _ in range(20):  # whole headers, 10 of the 1,000 bytes announced, then nothing
            stalled.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            stalled[-1].sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"resource'
            )
        try:
            for sock in stalled:
                answer = b""
                while chunk := sock.recv(4096):  # the answer, then the server's close
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
                assert b"no byte of the body came for 0.5 s" in answer
        finally:
            for sock in stalled:
                sock.close()
        assert _post(port, _body("sender"), 5.0) == 200
