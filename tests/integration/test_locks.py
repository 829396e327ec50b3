"""The writers' locks, on both backends: file locks under STRATA_HOME and Postgres advisory locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psycopg
import pytest

from tests.services import Postgres
from warehouse.settings import load_settings
from warehouse.storage import locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import DWD_REQUEST, DWD_TENANT_QUOTA

HOLDER = """
import sys, time
from warehouse.settings import load_settings
from warehouse.storage import locks
from warehouse.tables import DWD_REQUEST
partition = None if sys.argv[1] == "table" else {"event_date": sys.argv[1]}
with locks.hold(load_settings(), write=[(DWD_REQUEST, partition)]):
    print("held", flush=True)
    sys.stdin.readline()
"""
#: A writer that takes its lock, waits for a line on stdin, then publishes one quota row under it.
WRITER = """
import sys
import polars as pl
from warehouse.settings import load_settings
from warehouse.storage import locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import DWD_TENANT_QUOTA
with locks.hold(load_settings(), write=[(DWD_TENANT_QUOTA, None)]):
    print("held", flush=True)
    sys.stdin.readline()
    row = {"tenant_id": ["first"], "effective_from": ["2026-01-01"]} | {
        "daily_request_quota": ["1"], "daily_token_quota": ["1"]}
    publish(Lake(load_settings()), DWD_TENANT_QUOTA, pl.DataFrame(row), mode="overwrite", expectations=False)
"""


@pytest.fixture(params=["file", "postgres"])
def backend(request: pytest.FixtureRequest, strata_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test once per backend; the Postgres one in a database of its own, dropped after."""
    if request.param == "file":
        yield "file"
        return
    server: Postgres = request.getfixturevalue("postgres_server")  # only the Postgres runs need one
    with server.database("strata_locks_") as name:
        monkeypatch.setenv("STRATA_LOCK_URL", server.url(name))
        yield "postgres"
        locks._held.backends.clear()  # this process's connection to it


def _holding(what: str, *more: str, script: str = HOLDER) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, what, *more],
        env=os.environ.copy(),
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    if not proc.stdin.closed:
        proc.stdin.close()
    proc.wait(timeout=30)


def test_a_second_writer_of_a_partition_fails_naming_the_holder(backend: str) -> None:
    holder = _holding("2026-03-01")
    try:
        with (
            pytest.raises(locks.LockHeld) as err,
            locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-01"})]),
        ):
            pass
        assert f"pid {holder.pid}" in str(err.value) and "STRATA_LOCK_WAIT" in str(err.value)
        assert err.value.argument == "lock_wait" and err.value.retry  # the CLI names its --wait
        # Another partition of the same table is free: writers of different dates run side by side.
        with locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-02"})]):
            pass
    finally:
        _release(holder)
    with locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-01"})]):
        pass  # released: free again


def test_the_holder_is_named_whole_however_long_its_command_line(backend: str) -> None:
    path = "/landing/" + "very-long-folder-name/" * 6 + "requests.jsonl"
    holder = _holding("2026-03-01", "ingest", path)
    try:
        with (
            pytest.raises(locks.LockHeld) as err,
            locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-01"})]),
        ):
            pass
        assert f"pid {holder.pid} on " in str(err.value) and f"(-c 2026-03-01 ingest {path}) since " in str(err.value)
    finally:
        _release(holder)


def test_a_writer_that_lost_its_lock_publishes_nothing(backend: str) -> None:
    """Its Postgres session terminated (or, on files, its lock file removed under it), a writer's lock is
    lost and a second writer gets in: the first fails before its commit, so the second's is the only one."""
    first = _holding("first", script=WRITER)
    try:
        if backend == "postgres":
            with psycopg.connect(os.environ["STRATA_LOCK_URL"], autocommit=True) as admin:
                (ended,) = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
                    (f"strata: pid {first.pid} %",),
                ).fetchone()
            assert ended
        else:
            for lock_file in (load_settings().home / "locks").glob("*.lock"):
                lock_file.unlink()
        second = pl.DataFrame(
            {
                "tenant_id": ["second"],
                "effective_from": ["2026-01-01"],
                "daily_request_quota": ["2"],
                "daily_token_quota": ["2"],
            }
        )
        assert (
            publish(Lake(load_settings()), DWD_TENANT_QUOTA, second, mode="overwrite", expectations=False).version == 0
        )
    finally:
        _release(first)
    assert first.stderr is not None
    stderr = first.stderr.read()
    assert first.returncode == 1 and "LockLost: dwd.tenant_quota: this process no longer holds the lock" in stderr
    assert Lake(load_settings()).version(DWD_TENANT_QUOTA) == 0
    assert Lake(load_settings()).read_frame(DWD_TENANT_QUOTA)["tenant_id"].to_list() == ["second"]


def test_a_table_wide_writer_excludes_partition_writers_and_a_waiter_gets_its_turn(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = _holding("2026-03-01")
    try:
        with pytest.raises(locks.LockHeld), locks.hold(load_settings(), write=[(DWD_REQUEST, None)]):
            pass
        threading.Timer(1.0, _release, [holder]).start()  # the holder finishes while we wait
        monkeypatch.setenv("STRATA_LOCK_WAIT", "60")
        with locks.hold(load_settings(), write=[(DWD_REQUEST, None)]):
            assert holder.stdin is not None and holder.stdin.closed  # we got it once the holder let go
    finally:
        if holder.poll() is None:
            _release(holder)


def test_a_holder_that_dies_releases_its_locks(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _holding("table")
    with (
        pytest.raises(locks.LockHeld),
        locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-05"})]),
    ):
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    monkeypatch.setenv("STRATA_LOCK_WAIT", "10")  # Postgres ends the dead client's session a moment later
    with locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-03-05"})]):
        pass


def test_locks_are_reentrant_within_a_process(backend: str) -> None:
    settings = load_settings()
    with locks.hold(settings, write=[(DWD_REQUEST, {"event_date": "2026-03-01"})]):
        with locks.hold(settings, write=[(DWD_REQUEST, {"event_date": "2026-03-01"})], read=[DWD_REQUEST]):
            assert locks.held(DWD_REQUEST, {"event_date": "2026-03-01"})
        assert locks.held(DWD_REQUEST, {"event_date": "2026-03-01"})
    assert not locks.held(DWD_REQUEST, {"event_date": "2026-03-01"})
