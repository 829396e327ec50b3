"""SQL for analysts: a read-only, sandboxed DuckDB session over the lake."""
