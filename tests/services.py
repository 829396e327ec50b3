"""Real services for the tests: an S3 server (moto, on 127.0.0.1), a throwaway Postgres database,
Redis databases, and process trees that are stopped completely.

Each helper cleans up after itself: the moto process is stopped, the database dropped, the
Redis databases flushed (only the numbers given), every process started killed with its
children (Airflow's task processes start their own sessions, so a process group is not enough).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Postgres and Redis shared on this machine; tests use only these names and numbers.
POSTGRES = "host=127.0.0.1 port=5432 dbname=test"
REDIS = "redis://127.0.0.1:6379"
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
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    for process in processes:
        process.poll()


@contextmanager
def s3_server(log: Path) -> Iterator[str]:
    """A moto S3 server on a free 127.0.0.1 port; yields its endpoint URL."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p",
                                    str(port)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the moto S3 server did not start; see {log}") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_tree(process)


def create_bucket(endpoint: str, name: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=name)


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A new Postgres database named ``<prefix><random>``, dropped afterwards; yields its name."""
    import psycopg

    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_user() -> str:
    """The role the tests connect as (trust authentication: the OS user unless PGUSER says otherwise)."""
    import getpass

    return os.environ.get("PGUSER") or getpass.getuser()


@contextmanager
def redis_databases(*numbers: int) -> Iterator[list[str]]:
    """URLs of the given Redis database numbers, flushed before and after (only those)."""
    import redis

    urls = [f"{REDIS}/{n}" for n in numbers]
    for url in urls:
        redis.Redis.from_url(url).flushdb()
    try:
        yield urls
    finally:
        for url in urls:
            redis.Redis.from_url(url).flushdb()
