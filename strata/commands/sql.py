"""``strata sql``: read-only SQL over the lake's tables, one query or an interactive prompt."""

from __future__ import annotations

import contextlib
import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer
from rich.markup import escape
from rich.text import Text
from typer.core import TyperCommand

from strata.console import console, out, rounded, table_width
from strata.options import given_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from warehouse.settings import Settings
    from warehouse.sql.sandbox import Session


class _SqlCommand(TyperCommand):
    """``strata sql``'s parser: a query opening with an SQL comment (``-- …``) is the query, not an unknown option.

    No option has white space right after its ``--``, so such an argument is moved behind a ``--``: options may
    still come before or after it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        comments = [a for a in args if a[:2] == "--" and a[2:3].isspace()]
        if comments and "--" not in args:
            args = [*(a for a in args if a not in comments), "--", *comments]
        return super().parse_args(ctx, args)


app = typer.Typer()
_HELP = (
    "Tables are views named <layer>.<table> (ads.model_daily, dwd.request, …) of their current Delta "
    "versions. End a statement with ';'. .tables lists the tables, .schema TABLE its columns, .vertical (or \\x) "
    "prints every row as lines of column and value or goes back to tables (a row wider than the terminal is printed "
    "so anyway), .help shows this, .quit (or Ctrl-D) leaves."
)
#: The dot commands, for the message refusing another.
_COMMANDS = ".help, .tables, .schema TABLE, .vertical, .quit"


class Format(enum.StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


@app.command("sql", cls=_SqlCommand)
def sql_cmd(
    query: str | None = typer.Argument(
        None, help="SQL to run, or a dot command (.tables, .schema TABLE); without it, an interactive prompt opens."
    ),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="How to print the result."),
    out_file: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        parser=given_path,
        metavar="FILE",
        help="Write the result to this file (csv, json, parquet): written aside "
        "and renamed into place once whole; not inside STRATA_HOME, the lake or "
        "the landing zone.",
    ),
    as_of: list[str] = typer.Option(
        [],
        "--as-of",
        help="Read TABLE as of a Delta version or a time: "
        "TABLE=VERSION or TABLE=TIMESTAMP (ISO 8601, UTC by default); repeatable.",
    ),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Also read raw lines: the ODS and quarantine tables (they may hold personal data, prompts and responses).",
    ),
    max_rows: int = typer.Option(100, "--max-rows", min=1, help="Rows the table format shows."),
    vertical: bool = typer.Option(
        False,
        "--vertical",
        "-x",
        help="Table format: print each row as lines of column and value (chosen anyway for a row wider than "
        "the terminal).",
    ),
) -> None:
    """Run read-only SQL (DuckDB) on the lake's tables: ads.*, dws.*, dwd.*, ops.* (ods.* with --raw).

    Writes, COPY, ATTACH, INSTALL/LOAD, SET, files outside the lake and table functions or functions with
    side effects beyond range, generate_series, unnest, json_each and json_tree are refused.
    """
    from warehouse.settings import load_settings
    from warehouse.sql.sandbox import Session, parse_as_of

    if fmt is Format.parquet and out_file is None:
        raise typer.BadParameter("parquet needs --out FILE", param_hint="--format")
    if out_file is not None and fmt is Format.table:
        raise typer.BadParameter("--out writes csv, json or parquet: choose one with --format", param_hint="--out")
    settings = load_settings()
    if out_file is not None:
        from contracts.errors import InputError
        from warehouse.sql.export import target

        try:
            out_file = target(out_file, settings)
        except InputError as e:
            raise typer.BadParameter(str(e), param_hint="--out") from None
    pins = dict(parse_as_of(text) for text in as_of)
    with Session(settings, raw=raw, as_of=pins) as session:
        for view in session.views:
            if view.pinned:
                console.print(f"{view.name} as of version {view.version}")
        if query is None:
            _prompt(session, settings, max_rows, vertical)
            return
        if query.strip().startswith("."):  # no SQL starts with a dot: the prompt's command, as the one query
            readers = _dot_command(session, query.strip(), prompt=False)
        else:
            results = list(session.statements(query))  # every statement is checked before any runs
            if fmt is not Format.table and len(results) != 1:
                raise typer.BadParameter(f"--format {fmt.value} writes one result: give one statement")
            readers = session.execute(query)
        for reader in readers:
            if fmt is Format.table:
                _print_table(reader, max_rows, vertical)
            else:
                _export(reader, fmt.value, out_file)


def _export(reader: pa.RecordBatchReader, fmt: str, out_file: Path | None) -> None:
    from warehouse.sql.export import write, write_file

    if out_file is None:
        sys.stdout.flush()
        write(reader, fmt, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    rows = write_file(reader, fmt, out_file)
    console.print(f"wrote {rows:,} row(s) to {out_file}")


def _print_table(reader: pa.RecordBatchReader, max_rows: int, vertical: bool = False) -> None:
    """The first ``max_rows`` rows as a table, or ``vertical``ly — each row as lines of column and value,
    as psql's ``\\x`` — which is chosen too when the table would be wider than the terminal (a table
    squeezed to the width cuts every cell to ``…``)."""
    names = reader.schema.names
    rows: list[list[str]] = []
    total = 0
    for batch in reader:
        total += batch.num_rows
        for row in batch.slice(0, max(max_rows - len(rows), 0)).to_pylist():
            rows.append([_shown(v) for v in row.values()])
    if vertical or table_width(names, rows) > out.width:
        _print_vertical(names, rows)
    else:
        from rich.table import Table

        table = Table(*names, show_lines=False)
        for row in rows:
            table.add_row(*map(Text, row))
        out.print(table)
    more = f" (showing {len(rows):,}; --max-rows, or --format csv/json/parquet for all)" if total > len(rows) else ""
    out.print(f"{total:,} row(s){more}")


def _shown(value: object) -> str:
    """A value as the table format shows it: a float :func:`~strata.console.rounded` (csv, json and parquet
    keep every digit), NULL for null, anything else as Python prints it."""
    if value is None:
        return "NULL"
    return rounded(value) if isinstance(value, float) else str(value)


def _dot_command(session: Session, command: str, *, prompt: bool) -> Iterator[pa.RecordBatchReader]:
    """The results of a dot command, at the prompt or as the one query (``strata sql .tables``): .tables the
    views with their versions, .schema TABLE a table's columns (DESCRIBE), .help prints the help; another is
    refused. The prompt's own (.vertical, .quit) come here only as the one query, where they are refused too."""
    import pyarrow as pa

    from contracts.errors import InputError

    word, _, rest = command.partition(" ")
    if word == ".tables":
        views = session.views
        names, versions, pins = [v.name for v in views], [v.version for v in views], [v.pinned for v in views]
        yield pa.table({"table": names, "version": versions, "pinned": pins}).to_reader()
    elif word == ".schema" and rest.strip():
        name = rest.strip().rstrip(";").strip()
        if name not in {v.name for v in session.views}:
            raise InputError(f"{name!r} is not a table of the lake (.tables lists them)")
        yield from session.execute(f"DESCRIBE {name}")
    elif word == ".help":
        console.print(_HELP)
    elif word == ".schema":
        raise InputError(".schema names a table: .schema TABLE (.tables lists them)")
    elif not prompt and word in (".vertical", ".quit", ".exit"):
        here = "; here: --vertical (-x)" if word == ".vertical" else ""
        raise InputError(f"{word} is a command of the prompt (strata sql without a query){here}")
    else:
        raise InputError(f"unknown command {command} ({_COMMANDS})")


def _print_vertical(names: list[str], rows: list[list[str]]) -> None:
    from rich.rule import Rule
    from rich.table import Table

    for number, row in enumerate(rows, 1):
        out.print(Rule(f"row {number}", align="left", style="dim"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")  # a long value wraps, whole
        for name, value in zip(names, row, strict=True):
            grid.add_row(Text(name), Text(value))
        out.print(grid)


def _prompt(session: Session, settings: Settings, max_rows: int, vertical: bool) -> None:
    """An interactive prompt with line editing and history (GNU readline, kept under STRATA_HOME)."""
    import readline
    import signal

    import duckdb

    from contracts.errors import InputError

    history = settings.home / "sql_history"
    with contextlib.suppress(OSError):  # no history yet, or one it cannot read
        readline.read_history_file(history)
    readline.set_history_length(1000)
    readline.set_auto_history(False)  # history holds whole statements, not their lines
    console.print(f"strata sql: {_HELP}")
    lines: list[str] = []
    try:
        while True:
            try:
                line = input("   ...> " if lines else "strata> ")
            except EOFError:
                break
            except KeyboardInterrupt:
                lines = []
                console.print()
                continue
            command = line.strip()
            if not lines and command in (".quit", ".exit"):
                break
            if not lines and command in (".vertical", "\\x"):
                vertical = not vertical
                state = "on: every row" if vertical else "off: only a row wider than the terminal"
                console.print(f"vertical {state} prints as lines of column and value")
                continue
            if not lines and command.startswith("."):  # no SQL starts with a dot: not a statement's first line
                try:
                    for reader in _dot_command(session, command, prompt=True):
                        _print_table(reader, max_rows, vertical)
                except (duckdb.Error, InputError) as e:
                    console.print(f"[red]error:[/] {escape(str(e))}")
                continue
            lines.append(line)
            text = "\n".join(lines).strip()
            if not text.endswith(";"):
                if not text:
                    lines = []
                continue
            lines = []
            readline.add_history(" ".join(part.strip() for part in text.splitlines()))
            cancel = signal.signal(signal.SIGINT, lambda *_: session.cancel())  # Ctrl-C stops the query only
            try:
                for reader in session.execute(text):
                    _print_table(reader, max_rows, vertical)
            except (duckdb.Error, InputError) as e:  # refused, cancelled, or DuckDB's own error: the next one
                console.print(f"[red]error:[/] {escape(str(e))}")
            finally:
                signal.signal(signal.SIGINT, cancel)
    finally:
        history.parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(history)
