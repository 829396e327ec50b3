"""Storage: Delta Lake IO, write–audit–publish, DuckDB connections."""
