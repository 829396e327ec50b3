"""Where the lake lives — a local folder or object storage (``s3://…``) — and how each client reaches it.

Three libraries touch the lake, each configured its own way: deltalake (``storage_options``),
pyarrow (a ``FileSystem``) and DuckDB (the ``httpfs`` extension and an S3 secret). All three
are derived here from the same settings (``STRATA_S3_ENDPOINT_URL``, ``STRATA_S3_REGION``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``), so a lake on S3 — or on any S3-compatible
store, MinIO or a test server — is read and written by the same code as a local one. Without
explicit credentials each client falls back to its own default AWS credential chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from warehouse.settings import Settings

if TYPE_CHECKING:
    import duckdb
    import pyarrow.fs as pafs

S3 = "s3://"


def is_object_store(uri: str) -> bool:
    """Whether ``uri`` names object storage (``s3://``) rather than a local path."""
    return uri.startswith(S3)


def storage_options(settings: Settings) -> dict[str, str] | None:
    """deltalake's ``storage_options`` for the lake (None for a local lake)."""
    if not is_object_store(settings.lake_uri):
        return None
    options: dict[str, str] = {}
    if settings.s3_endpoint_url:
        options["AWS_ENDPOINT_URL"] = settings.s3_endpoint_url
        if settings.s3_endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if settings.s3_region:
        options["AWS_REGION"] = settings.s3_region
    if settings.s3_access_key_id and settings.s3_secret_access_key:
        options["AWS_ACCESS_KEY_ID"] = settings.s3_access_key_id
        options["AWS_SECRET_ACCESS_KEY"] = settings.s3_secret_access_key
    return options


def filesystem(settings: Settings, uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem for ``uri`` (in the lake or beside it) and the path inside it."""
    import pyarrow.fs as pafs

    if not is_object_store(uri):
        return cast("tuple[pafs.FileSystem, str]", pafs.FileSystem.from_uri(uri))
    kwargs: dict[str, object] = {}
    if settings.s3_endpoint_url:
        endpoint = urlsplit(settings.s3_endpoint_url)
        kwargs |= {"endpoint_override": endpoint.netloc, "scheme": endpoint.scheme}
    if settings.s3_region:
        kwargs["region"] = settings.s3_region
    if settings.s3_access_key_id and settings.s3_secret_access_key:
        kwargs |= {"access_key": settings.s3_access_key_id, "secret_key": settings.s3_secret_access_key}
    return pafs.S3FileSystem(**kwargs), uri.removeprefix(S3).rstrip("/")


def configure_duckdb(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Let a DuckDB connection read the lake: for ``s3://``, load ``httpfs`` (installed from its wheel,
    never downloaded) and add a session secret for the lake's store. Nothing to do for a local lake."""
    if not is_object_store(settings.lake_uri):
        return
    con.execute("LOAD httpfs")
    params = {"TYPE": "s3", "URL_STYLE": "path"}
    if settings.s3_endpoint_url:
        endpoint = urlsplit(settings.s3_endpoint_url)
        params |= {"ENDPOINT": endpoint.netloc, "USE_SSL": str(endpoint.scheme == "https").lower()}
    else:
        params["URL_STYLE"] = "vhost"
    if settings.s3_region:
        params["REGION"] = settings.s3_region
    if settings.s3_access_key_id and settings.s3_secret_access_key:
        params |= {"KEY_ID": settings.s3_access_key_id, "SECRET": settings.s3_secret_access_key}
    literals = ", ".join(f"{key} {_literal(value)}" for key, value in params.items())
    con.execute(f"CREATE OR REPLACE SECRET strata_lake ({literals}, SCOPE '{_bucket(settings.lake_uri)}')")


def _literal(value: str) -> str:
    if value in ("true", "false") or value == "s3":
        return value
    return "'" + value.replace("'", "''") + "'"


def _bucket(uri: str) -> str:
    return S3 + uri.removeprefix(S3).split("/", 1)[0]
