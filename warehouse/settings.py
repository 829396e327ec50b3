"""One settings object, read from ``STRATA_*`` environment variables.

Everything Strata writes lives under ``STRATA_HOME`` (the lake, the landing zone,
Feast state, the model registry, Airflow's home) unless a variable moves one part
elsewhere; only what can be derived again at any time, and holds for every home (the ADS
project's parse), goes to a per-user cache folder. This module is the bottom of the house:
every other module may import it, and it imports nothing of Strata's.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, TypeAlias

from contracts.errors import InputError

OnlineStore: TypeAlias = Literal["sqlite", "redis"]
_SECRET_FIELDS = frozenset({"pseudonym_key", "s3_access_key_id", "s3_secret_access_key"})
#: A tenant a source names for its records (``STRATA_DEFAULT_TENANT``, ``strata ingest --tenant``).
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The default :attr:`Settings.cache_dir` (``load_settings`` reads ``STRATA_CACHE_DIR`` or ``XDG_CACHE_HOME``).
_CACHE_DIR = Path("~/.cache/strata").expanduser()


class ConfigError(InputError):
    """A setting is missing or malformed; the message says which and how to fix it."""


@dataclass(frozen=True)
class Settings:
    """Effective configuration. Build it with :func:`load_settings`."""

    home: Path
    lake_uri: str
    landing_dir: Path
    feast_dir: Path
    registry_dir: Path
    airflow_home: Path
    pseudonym_key: str | None
    online_store: OnlineStore
    redis_url: str
    ods_retention_days: int
    #: Where writers' locks live: a Postgres URL (advisory locks, for a cluster), else files under home.
    lock_url: str | None = None
    #: Seconds a writer waits for a lock another process holds before it fails (0: fail at once).
    lock_wait: float = 0.0
    #: The earliest plausible request time; a record before it is quarantined (``ts.floor``).
    ts_floor: dt.datetime = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    #: The tenant of OTLP spans that name none (``STRATA_DEFAULT_TENANT``; ``strata ingest --tenant`` wins).
    default_tenant: str | None = None
    #: Scoring runs as this many shards (one mapped Airflow task each).
    score_shards: int = 2
    #: Object storage for an ``s3://`` lake: an endpoint for S3-compatible stores (MinIO, a test
    #: server), the region, and credentials (else each client's default AWS credential chain).
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    #: Derived files that hold for every home (the ADS dbt project's parse): safe to delete.
    cache_dir: Path = _CACHE_DIR
    #: Bounds of a ``strata sql`` statement: seconds it may run, DuckDB's memory and spill limits.
    sql_timeout_s: float = 300.0
    sql_memory_limit: str = "2GB"
    sql_spill_limit: str = "10GB"
    #: DuckDB's memory of the instance that reads the lake for a step (it spills beyond it); the
    #: scorer sizes its feature reads from it.
    lake_reader_memory: str = "512MB"

    def require_pseudonym_key(self) -> bytes:
        """The HMAC key for user pseudonyms; refuses to run without one."""
        if not self.pseudonym_key:
            raise ConfigError(
                "STRATA_PSEUDONYM_KEY is not set: set it to a secret of at least 16 characters "
                "(user ids are pseudonymized with it and it must stay the same between runs)"
            )
        return self.pseudonym_key.encode()

    def masked(self) -> dict[str, str]:
        """Every setting as text, secrets masked, for display."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SECRET_FIELDS:
                out[f.name] = "****" if value else "(not set)"
            elif f.name in ("redis_url", "lock_url"):
                out[f.name] = re.sub(r"//[^@/]*@", "//****@", str(value))
            else:
                out[f.name] = str(value)
        return out

    def to_env(self) -> dict[str, str]:
        """The environment variables that give these settings back (for a child process or a worker)."""
        env = {
            "STRATA_HOME": str(self.home),
            "STRATA_LAKE_URI": self.lake_uri,
            "STRATA_LANDING_DIR": str(self.landing_dir),
            "AIRFLOW_HOME": str(self.airflow_home),
            "STRATA_ONLINE_STORE": self.online_store,
            "STRATA_REDIS_URL": self.redis_url,
            "STRATA_ODS_RETENTION_DAYS": str(self.ods_retention_days),
            "STRATA_LOCK_WAIT": str(self.lock_wait),
            "STRATA_TS_FLOOR": self.ts_floor.date().isoformat(),
            "STRATA_SCORE_SHARDS": str(self.score_shards),
            "STRATA_CACHE_DIR": str(self.cache_dir),
            "STRATA_SQL_TIMEOUT_S": f"{self.sql_timeout_s:g}",
            "STRATA_SQL_MEMORY_LIMIT": self.sql_memory_limit,
            "STRATA_SQL_SPILL_LIMIT": self.sql_spill_limit,
            "STRATA_LAKE_READER_MEMORY": self.lake_reader_memory,
        }
        optional = {
            "STRATA_PSEUDONYM_KEY": self.pseudonym_key,
            "STRATA_LOCK_URL": self.lock_url,
            "STRATA_DEFAULT_TENANT": self.default_tenant,
            "STRATA_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "STRATA_S3_REGION": self.s3_region,
            "AWS_ACCESS_KEY_ID": self.s3_access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_access_key,
        }
        return env | {k: v for k, v in optional.items() if v}


def _positive(env: Mapping[str, str], name: str, default: str) -> int:
    value = env.get(name, default)
    if not (value.isascii() and value.isdigit()) or int(value) < 1:  # "²".isdigit() is true
        raise ConfigError(f"{name} must be a whole number >= 1, not {value!r}")
    return int(value)


def _seconds(env: Mapping[str, str], name: str, default: str) -> float:
    value = env.get(name, default)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"{name} must be a number of seconds > 0, not {value!r}")
    return seconds


def _size(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default).strip()
    if (
        not re.fullmatch(r"[0-9]+(\.[0-9]+)?\s*([KMGT]i?B)", value, re.IGNORECASE)
        or not float(re.sub(r"[^0-9.]", "", value)) > 0
    ):
        raise ConfigError(f"{name} must be a size such as 512MB or 4GB, not {value!r}")
    return value


def size_bytes(size: str) -> int:
    """Bytes of a checked size, as DuckDB reads it: KB, MB… are powers of 1000, KiB, MiB… of 1024."""
    found = re.fullmatch(r"([0-9.]+)\s*([KMGT])(i?)B", size.strip(), re.IGNORECASE)
    if found is None:
        raise ConfigError(f"{size!r} is not a size such as 512MB or 4GB")
    number, unit, binary = found.groups()
    return int(float(number) * (1024 if binary else 1000) ** ("KMGT".index(unit.upper()) + 1))


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    home = Path(env.get("STRATA_HOME", ".strata")).expanduser().resolve()
    lake = env.get("STRATA_LAKE_URI") or str(home / "lake")
    if "://" not in lake:
        lake = str(Path(lake).expanduser().resolve())
    store = env.get("STRATA_ONLINE_STORE", "sqlite")
    redis_url = env.get("STRATA_REDIS_URL", "redis://127.0.0.1:6379/0")
    if store.startswith(("redis://", "rediss://")):  # one setting: the store and where it is
        store, redis_url = "redis", store
    store = store.lower()
    if store not in ("sqlite", "redis"):
        raise ConfigError(f"STRATA_ONLINE_STORE must be 'sqlite', 'redis' or a redis:// URL, not {store!r}")
    key = env.get("STRATA_PSEUDONYM_KEY") or None
    if key is not None and len(key) < 16:
        raise ConfigError("STRATA_PSEUDONYM_KEY must be at least 16 characters long")
    endpoint = env.get("STRATA_S3_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL") or None
    if endpoint is not None and not re.match(r"https?://[^/]+", endpoint):
        raise ConfigError(
            f"STRATA_S3_ENDPOINT_URL must be an http(s) URL such as http://127.0.0.1:9000, not {endpoint!r}"
        )
    lock_url = env.get("STRATA_LOCK_URL") or None
    if lock_url is not None and not lock_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"STRATA_LOCK_URL must be a postgresql:// URL (advisory locks), not {lock_url.split(':')[0]!r}"
        )
    wait = env.get("STRATA_LOCK_WAIT", "0")
    try:
        lock_wait = float(wait)
    except ValueError:
        lock_wait = -1.0
    if not lock_wait >= 0:
        raise ConfigError(f"STRATA_LOCK_WAIT must be a number of seconds >= 0, not {wait!r}")
    floor_text = env.get("STRATA_TS_FLOOR", "2000-01-01")
    try:
        floor = dt.datetime.combine(dt.date.fromisoformat(floor_text), dt.time(), dt.UTC)
    except ValueError:
        raise ConfigError(f"STRATA_TS_FLOOR must be a date like 2000-01-01, not {floor_text!r}") from None
    tenant = env.get("STRATA_DEFAULT_TENANT") or None
    if tenant is not None and not TENANT.fullmatch(tenant):
        raise ConfigError(f"STRATA_DEFAULT_TENANT must be 1-128 letters, digits, '.', '_' or '-', not {tenant!r}")
    return Settings(
        home=home,
        lake_uri=lake,
        landing_dir=Path(env.get("STRATA_LANDING_DIR", home / "landing")).expanduser().resolve(),
        feast_dir=home / "feast",
        registry_dir=home / "models",
        airflow_home=Path(env.get("AIRFLOW_HOME", home / "airflow")).expanduser().resolve(),
        pseudonym_key=key,
        online_store=store,  # type: ignore[arg-type]
        redis_url=redis_url,
        ods_retention_days=_positive(env, "STRATA_ODS_RETENTION_DAYS", "90"),
        lock_url=lock_url,
        lock_wait=lock_wait,
        ts_floor=floor,
        default_tenant=tenant,
        score_shards=_positive(env, "STRATA_SCORE_SHARDS", "2"),
        s3_endpoint_url=endpoint,
        s3_region=env.get("STRATA_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        s3_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
        s3_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        cache_dir=Path(env.get("STRATA_CACHE_DIR") or Path(env.get("XDG_CACHE_HOME") or "~/.cache") / "strata")
        .expanduser()
        .resolve(),
        sql_timeout_s=_seconds(env, "STRATA_SQL_TIMEOUT_S", "300"),
        sql_memory_limit=_size(env, "STRATA_SQL_MEMORY_LIMIT", "2GB"),
        sql_spill_limit=_size(env, "STRATA_SQL_SPILL_LIMIT", "10GB"),
        lake_reader_memory=_size(env, "STRATA_LAKE_READER_MEMORY", "512MB"),
    )


@dataclass(frozen=True)
class CollectSettings:
    """``strata collect``: where the OTLP/HTTP receiver listens and how much it holds.

    The body limit applies to the decompressed body and is at least the OpenTelemetry
    Collector's default (20 MiB): an exporter drops a batch answered 413 instead of retrying.
    """

    host: str
    port: int
    max_body_bytes: int
    #: Bytes spooled but not yet handed to the landing zone above which requests get 503.
    spool_max_bytes: int
    segment_bytes: int
    segment_seconds: float
    tokens_file: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    #: Processes serving the port; protobuf → JSON is CPU-bound, so one per spare core.
    workers: int = 1


def _optional_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name) or None
    return Path(value).expanduser().resolve() if value else None


def load_collect_settings(env: Mapping[str, str] | None = None) -> CollectSettings:
    """Read the receiver's ``STRATA_COLLECT_*`` settings from ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    port = _positive(env, "STRATA_COLLECT_PORT", "4318")
    if port > 65535:
        raise ConfigError(f"STRATA_COLLECT_PORT must be a TCP port (1-65535), not {port}")
    cert, key = _optional_path(env, "STRATA_COLLECT_TLS_CERT"), _optional_path(env, "STRATA_COLLECT_TLS_KEY")
    if (cert is None) != (key is None):
        raise ConfigError("STRATA_COLLECT_TLS_CERT and STRATA_COLLECT_TLS_KEY go together: set both files or neither")
    seconds = env.get("STRATA_COLLECT_SEGMENT_SECONDS", "60")
    try:
        segment_seconds = float(seconds)
    except ValueError:
        segment_seconds = 0.0
    if not segment_seconds > 0:
        raise ConfigError(f"STRATA_COLLECT_SEGMENT_SECONDS must be a number of seconds > 0, not {seconds!r}")
    return CollectSettings(
        host=env.get("STRATA_COLLECT_HOST", "127.0.0.1"),
        port=port,
        max_body_bytes=_positive(env, "STRATA_COLLECT_MAX_BODY_BYTES", str(32 << 20)),
        spool_max_bytes=_positive(env, "STRATA_COLLECT_SPOOL_MAX_BYTES", str(1 << 30)),
        segment_bytes=_positive(env, "STRATA_COLLECT_SEGMENT_BYTES", str(64 << 20)),
        segment_seconds=segment_seconds,
        tokens_file=_optional_path(env, "STRATA_COLLECT_TOKENS_FILE"),
        tls_cert=cert,
        tls_key=key,
        workers=_positive(env, "STRATA_COLLECT_WORKERS", "1"),
    )
