"""Install DuckDB's ``delta`` and ``httpfs`` extensions from their PyPI wheels, never from the internet.

DuckDB downloads extensions at run time by default; this machine (and many production
ones) cannot. The ``duckdb-extension-delta`` and ``duckdb-extension-httpfs`` wheels ship the
binaries for our pinned DuckDB; installing them into DuckDB's extension directory lets every
connection — ours, dbt-duckdb's and Feast's through ibis — ``LOAD delta`` (Delta tables through
their log) and ``LOAD httpfs`` (a lake on ``s3://``) offline.
"""

from __future__ import annotations

from pathlib import Path

#: Extension name → the wheel's Python package that ships it.
BUNDLED = {"delta": "duckdb_extension_delta", "httpfs": "duckdb_extension_httpfs"}


def bundled_extension(name: str) -> Path:
    """Path of an extension binary shipped for the installed DuckDB version."""
    import importlib

    import duckdb

    package = importlib.import_module(BUNDLED[name])
    path = Path(str(package.__file__)).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(
            f"no {name} extension for DuckDB {duckdb.__version__} in {BUNDLED[name].replace('_', '-')} "
            f"(looked for {path}); pin duckdb to the release the extension wheel is built for"
        )
    return path


def bundled_delta_extension() -> Path:
    """Path of the delta extension binary shipped for the installed DuckDB version."""
    return bundled_extension("delta")


def ensure_extension(name: str) -> Path:
    """Install a bundled extension (idempotent) and prove it loads; returns its install path."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute(f"INSTALL '{bundled_extension(name)}'")
        con.execute(f"LOAD {name}")
        row = con.execute(
            "SELECT install_path FROM duckdb_extensions() WHERE extension_name = ? AND loaded", [name]
        ).fetchone()
    finally:
        con.close()
    if row is None:
        raise RuntimeError(f"the {name} extension was installed but did not load")
    return Path(row[0])


def ensure_delta_extension() -> Path:
    """Install the bundled delta extension (idempotent) and prove it loads; returns its install path."""
    return ensure_extension("delta")


if __name__ == "__main__":
    for extension in BUNDLED:
        print(f"duckdb {extension} extension ready: {ensure_extension(extension)}")
