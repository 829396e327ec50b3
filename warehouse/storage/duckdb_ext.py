"""Install DuckDB's ``delta`` extension from its PyPI wheel, never from the internet.

DuckDB downloads extensions at run time by default; this machine (and many production
ones) cannot. The ``duckdb-extension-delta`` wheel ships the binary for our pinned
DuckDB; installing it into DuckDB's extension directory lets every connection — ours,
dbt-duckdb's and Feast's through ibis — ``LOAD delta`` offline.
"""

from __future__ import annotations

from pathlib import Path


def bundled_delta_extension() -> Path:
    """Path of the delta extension binary shipped for the installed DuckDB version."""
    import duckdb
    import duckdb_extension_delta

    path = (Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
            / "delta.duckdb_extension")
    if not path.is_file():
        raise RuntimeError(
            f"no delta extension for DuckDB {duckdb.__version__} in duckdb-extension-delta "
            f"(looked for {path}); pin duckdb to the release the extension wheel is built for"
        )
    return path


def ensure_delta_extension() -> Path:
    """Install the bundled delta extension (idempotent) and prove it loads; returns its install path."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute(f"INSTALL '{bundled_delta_extension()}'")
        con.execute("LOAD delta")
        row = con.execute(
            "SELECT install_path FROM duckdb_extensions() WHERE extension_name = 'delta' AND loaded"
        ).fetchone()
    finally:
        con.close()
    if row is None:
        raise RuntimeError("the delta extension was installed but did not load")
    return Path(row[0])


if __name__ == "__main__":
    print(f"duckdb delta extension ready: {ensure_delta_extension()}")
