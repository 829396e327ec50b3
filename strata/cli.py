"""The ``strata`` command line: every pipeline step, callable by a person or a scheduler.

The root app holds the global options and the one error boundary; each topic's commands
live in ``strata/commands/`` and are registered at the bottom. Commands import the library
they need inside their bodies, so ``strata --help`` stays fast. An error of Strata's family
(:mod:`contracts.errors`) is one clear line and exit code 1, naming the option to change when the
library names the argument at fault; any other exception is a bug, said so in one line with the
command to rerun with ``--debug``, which shows the traceback. The library's log (``strata.*``) shows
on stderr from WARNING, from INFO with ``-v`` (what each step does, its progress and counts),
from DEBUG with ``-vv``; ``STRATA_LOG_LEVEL`` sets the level when no ``-v`` is given.
"""

from __future__ import annotations

import inspect
import shlex
import sys
from dataclasses import dataclass

import typer
from rich.markup import escape

from contracts.errors import StrataError
from strata.commands import (
    airflow,
    build,
    collect,
    contracts,
    demo,
    docs,
    explain,
    features,
    ingest,
    models,
    ops,
    reference,
    report,
    sql,
    trace,
)
from strata.console import console, log_level, log_shown, out

#: The option that sets each argument the library names in an error (:attr:`StrataError.argument`).
OPTIONS: dict[str, str] = {
    "as_of": "--as-of",
    "batch": "--batch",
    "day": "--date",
    "days": "--date",
    "features": "--features",
    "fmt": "--format",
    "host": "--host",
    "lock_wait": "--wait SECONDS",
    "mapping_file": "--mapping",
    "path": "--out",
    "port": "--port",
    "provider": "--provider",
    "raw": "--raw",
    "shard": "--shard",
    "table": "TABLE",
    "start": "--start",
    "tenant": "--tenant",
    "until": "--until",
    "user_id": "--user",
}


#: The command that runs each step the library names in an error (:attr:`StrataError.step`).
COMMANDS: dict[str, str] = {
    "build_ads": "strata build ads --date D",
    "build_dwd": "strata build dwd --date D",
    "land": "strata ingest PATH",
    "materialize": "strata features materialize",
    "train": "strata model train --name NAME --until D",
}


@dataclass
class Run:
    """What the root options say about this run, for the error boundary in :func:`main`."""

    debug: bool = False


app = typer.Typer(
    name="strata",
    help="Strata: AI-service request logs → contract-checked Delta lakehouse, features and scores.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    verbose: int = typer.Option(
        0,
        "--verbose",
        "-v",
        count=True,
        show_default=False,
        help="Log what each step does on stderr (-v: steps, progress, counts; -vv: detail). "
        "Default: warnings only, or STRATA_LOG_LEVEL.",
    ),
) -> None:
    """Strata command line. Settings come from STRATA_* environment variables (see `strata config`)."""
    ctx.ensure_object(Run).debug = debug
    ctx.with_resource(log_shown(log_level(verbose)))


@app.command("config")
def config_cmd() -> None:
    """Print the effective configuration (secrets masked) and where contracts are read from."""
    from rich.table import Table

    from contracts.loader import search_path
    from warehouse.settings import load_settings

    table = Table("variable", "value", title="Strata configuration")
    for variable, value in load_settings().masked().items():
        table.add_row(variable, value)
    table.add_row("STRATA_CONTRACTS_PATH", ", ".join(str(p) for p in search_path()))  # the shipped folder first
    out.print(table)


app.add_typer(demo.app)
app.add_typer(ingest.app)
app.add_typer(build.app, name="build")
app.add_typer(reference.app)
app.add_typer(ops.app)
app.add_typer(models.app, name="model")
app.add_typer(features.app, name="features")
app.add_typer(contracts.app, name="contracts")
app.add_typer(sql.app)
app.add_typer(trace.app)
app.add_typer(explain.app)
app.add_typer(docs.app)
app.add_typer(report.app)
app.add_typer(airflow.app, name="airflow")
app.add_typer(collect.app)


def _unwrapped(text: str) -> str:
    """A help text whose paragraphs are each one line: the terminal wraps them, not the source's line
    breaks (rich keeps those, so a paragraph broke mid-sentence at 80 columns)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _unwrap_help(typer_app: typer.Typer) -> None:
    """Every command's and group's help, :func:`_unwrapped`."""
    for command in typer_app.registered_commands:
        text = command.help or inspect.getdoc(command.callback)
        command.help = _unwrapped(text) if text else None
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _unwrap_help(group.typer_instance)


_unwrap_help(app)


def error_line(exc: Exception) -> str:
    """The one line the CLI prints for an error (markup escaped): a Strata error's message, with the
    option to change when the library names the argument at fault and the command to run when it names
    a step; any other exception as a bug."""
    if isinstance(exc, StrataError):
        hints = "; ".join(h for h in (OPTIONS.get(exc.argument or ""), COMMANDS.get(exc.step or "")) if h)
        return escape(str(exc) or type(exc).__name__) + (f" ({hints})" if hints else "")
    return escape(f"a bug in Strata, not in what was asked: {type(exc).__name__}: {exc}")


def main() -> None:
    """Entry point: run the app; a usage error is one line and exit code 2, any other error one line
    and exit code 1 (``--debug``: its traceback)."""
    # typer vendors click and exports no name for its usage errors (typer.BadParameter is one of them)
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    run = Run()
    try:
        # standalone_mode=False: click's errors come here instead of its rich panel of several lines
        code = app(prog_name="strata", standalone_mode=False, obj=run)
    except SystemExit:
        raise
    except NoArgsIsHelpError:  # `strata build`: its help is printed already
        sys.exit(2)
    except ClickException as exc:  # a usage error (unknown option, bad value) or a file click could not open
        hint = f" (see '{exc.ctx.command_path} --help')" if isinstance(exc, UsageError) and exc.ctx else ""
        message = " ".join(exc.format_message().split())
        console.print(f"[red]error:[/] {escape(message)}{escape(hint)}", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]")
        sys.exit(130)
    except Exception as exc:  # the CLI's one error boundary
        if run.debug:
            raise
        # Escaped: a message may hold brackets (a partition "[event_date = …]", a path) that rich
        # would otherwise take for markup and drop.
        console.print(f"[red]error:[/] {error_line(exc)}", soft_wrap=True)  # one line, the terminal wraps it
        if not isinstance(exc, StrataError):  # --debug is the root's option: it goes before the command
            again = shlex.join(["strata", "--debug", *sys.argv[1:]])
            console.print(f"[dim](for the traceback, run again with --debug: {escape(again)})[/]", soft_wrap=True)
        sys.exit(1)
    if code == 130:  # typer turns a Ctrl-C inside a command into Exit(130), returned here
        console.print("[red]interrupted[/]")
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(n) in a command returns n here


if __name__ == "__main__":
    main()
