"""What an analyst's statement may name: the lake's views, a few table functions, pure functions.

DuckDB's statement type is not enough: ``SELECT * FROM enable_logging(…)`` is a SELECT that
writes wherever it is told, ``write_blob`` is a scalar function that writes files, and a bare
string as a table name (``FROM 'file.csv'``) reads a file. So each statement is parsed into
DuckDB's own syntax tree (``json_serialize_sql``) and walked before it runs:

* every table it reads is a view ``<layer>.<table>`` of the session or a CTE in scope;
* every table function is on :data:`TABLE_FUNCTIONS` — ``query()``, ``read_*``, ``glob``,
  pragmas as functions, ``duckdb_secrets()`` and the rest are refused;
* no function is one DuckDB marks as having side effects (bar the clock, random numbers and
  UUIDs) or one of :data:`DENIED_FUNCTIONS`, which touch files, settings or run SQL text.

A statement the serializer cannot take (``PRAGMA table_info(…)``) is refused, not run unchecked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import duckdb

from contracts.errors import InputError


class QueryRefused(InputError):
    """A statement that is not a read: nothing of it ran."""


#: Table functions a statement may call: numbers, list and JSON unnesting (the views are its tables).
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree"})
#: Functions DuckDB marks as having side effects that only read the clock, the session or random state.
HARMLESS_SIDE_EFFECTS = frozenset(
    {
        "current_connection_id",
        "current_database",
        "current_date",
        "current_query",
        "current_query_id",
        "current_schema",
        "current_schemas",
        "current_transaction_id",
        "error",
        "gen_random_uuid",
        "get_current_time",
        "get_current_timestamp",
        "in_search_path",
        "now",
        "random",
        "stats",
        "today",
        "transaction_timestamp",
        "txid_current",
        "uuid",
        "uuidv4",
        "uuidv7",
    }
)
#: Functions with no side-effect mark that still reach outside the query: files (``write_blob``),
#: settings and variables, SQL text they parse or plan, and macros over catalog table functions.
DENIED_FUNCTIONS = frozenset(
    {
        "write_blob",
        "current_setting",
        "getvariable",
        "json_serialize_sql",
        "json_serialize_plan",
        "json_deserialize_sql",
        "json_execute_serialized_sql",
        "parse_duckdb_log_message",
        "format_type",
        "get_block_size",
        "pg_get_constraintdef",
        "pg_get_viewdef",
        "pg_sleep",
        "sleep_ms",
    }
)
#: ``SHOW …`` forms without a query of their own: DuckDB lists its catalog.
_SHOWN = frozenset({"tables", "databases", "__show_tables_expanded"})
#: The catalog of a session's in-memory database, which a table name may spell out.
_CATALOGS = frozenset({"", "memory"})


def denied_functions(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The functions of ``con``'s DuckDB a statement may not call (lower case)."""
    marked = {
        name.lower()
        for (name,) in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE has_side_effects"
        ).fetchall()
    }
    return frozenset(marked - HARMLESS_SIDE_EFFECTS) | DENIED_FUNCTIONS


def check(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    views: Iterable[tuple[str, str]],
    denied: frozenset[str],
    *,
    unknown_hint: str = "",
) -> None:
    """Refuse ``sql`` (one SELECT statement) unless it reads only ``views`` with allowed functions.

    ``con`` parses (it must be one that cannot read files: parsing alone does not, but keep
    it that way); ``views`` are ``(schema, name)`` pairs in lower case; ``unknown_hint`` ends
    the message about a table that is not one of them.
    """
    result = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    try:
        tree = json.loads(result[0]) if result else {"error": True}
        if tree.get("error") or len(tree.get("statements", ())) != 1:
            raise QueryRefused(
                "this statement cannot be checked, so it is refused (a session runs SELECT, WITH, "
                "VALUES, DESCRIBE, SHOW, SUMMARIZE, PIVOT … IN (…) and EXPLAIN of one; "
                "for PRAGMA table_info use DESCRIBE)"
            )
        _Walk(frozenset(views), denied, unknown_hint).node(tree["statements"][0], frozenset())
    except RecursionError:
        raise QueryRefused("this statement is nested too deeply to be checked, so it is refused") from None


class _Walk:
    def __init__(self, views: frozenset[tuple[str, str]], denied: frozenset[str], unknown_hint: str) -> None:
        self.views, self.denied, self.unknown_hint = views, denied, unknown_hint

    def node(self, node: Any, ctes: frozenset[str]) -> None:
        if isinstance(node, list):
            for item in node:
                self.node(item, ctes)
            return
        if not isinstance(node, dict):
            return
        cte_map = (node.get("cte_map") or {}).get("map") or []
        for entry in cte_map:  # a CTE sees the ones before it (and itself, when recursive)
            self.node(entry.get("value"), ctes)
            ctes |= {str(entry.get("key", "")).lower()}
        if node.get("type") == "RECURSIVE_CTE_NODE":
            ctes |= {str(node.get("cte_name", "")).lower()}
        self._vet(node, ctes)
        for key, value in node.items():
            if key != "cte_map":
                self.node(value, ctes)

    def _vet(self, node: dict[str, Any], ctes: frozenset[str]) -> None:
        kind = node.get("type")
        if "function_name" in node:
            name = str(node["function_name"]).lower()
            if name in self.denied:
                raise QueryRefused(
                    f"{name}() is refused: a session runs functions without side effects "
                    "or access to files and settings"
                )
        if kind == "TABLE_FUNCTION":
            name = str((node.get("function") or {}).get("function_name", "")).lower()
            if name not in TABLE_FUNCTIONS:
                raise QueryRefused(
                    f"table function {name}() is refused: a session reads the lake's views "
                    f"(<layer>.<table>) and {', '.join(sorted(TABLE_FUNCTIONS))}"
                )
        elif kind == "BASE_TABLE":
            schema, name = str(node.get("schema_name", "")).lower(), str(node.get("table_name", "")).lower()
            catalog = str(node.get("catalog_name", "")).lower()
            known = (schema, name) in self.views or (not schema and name in ctes)
            if catalog not in _CATALOGS or not known:
                shown = ".".join(p for p in (catalog, schema, name) if p)
                raise QueryRefused(
                    f"{shown!r} is not a table of the lake: a session reads the views <layer>.<table> "
                    f"(.tables lists them), not files or other tables{self.unknown_hint}"
                )
        elif (
            kind == "SHOW_REF"
            and node.get("query") is None
            and str(node.get("table_name", "")).strip('"').lower() not in _SHOWN
        ):
            raise QueryRefused(f"SHOW {node.get('table_name')} is refused")
