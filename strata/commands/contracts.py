"""``strata contracts …``: lint, show, diff and lock the table contracts."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from strata.console import console, out
from strata.options import existing_file

app = typer.Typer(
    help="Table contracts (ODCS YAML in contracts/tables): lint, show, diff, lock.",
    no_args_is_help=True,
)


@app.command("lint")
def lint_cmd() -> None:
    """Check every contract file and the lock; exit 1 on any problem."""
    from contracts.lint import lint
    from contracts.loader import CONTRACTS_DIR

    problems = lint()
    for p in problems:
        console.print(f"[red]✗[/] {escape(str(p))}", highlight=False)
    if problems:
        raise typer.Exit(1)
    count = len(list(CONTRACTS_DIR.glob("*.yaml")))
    out.print(f"[green]✓[/] {count} contracts OK")


@app.command("show")
def show_cmd(table: str = typer.Argument(..., help="Table name, e.g. dwd.request.")) -> None:
    """Print a table's contract: columns, types and rules."""
    from contracts.errors import ContractError
    from contracts.loader import load_contract
    from contracts.rules import rules, span

    try:
        c = load_contract(table)
    except ContractError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        raise typer.Exit(1) from None
    fresh = (
        (
            f"latency ≤ {span(c.freshness.max_latency)} on {c.freshness.column}"
            + (f", every {span(c.freshness.frequency)}" if c.freshness.frequency else "")
        )
        if c.freshness
        else "—"
    )
    rows = f"{c.row_count.minimum:,} … {c.row_count.maximum:,}" if c.row_count.maximum else f"≥ {c.row_count.minimum:,}"
    out.print(f"[bold]{c.name}[/] v{c.version} · layer {c.layer} · owner {c.owner}")
    out.print(
        escape(
            f"key {list(c.primary_key) or '—'} · partitioned by {list(c.partition_columns) or '—'} · "
            f"rows per write {rows} · freshness {fresh}"
        ),
        highlight=False,
    )
    # Two columns, so it reads at 80: the column's name, then its type and rules, its description below them.
    grid = Table("column", "type · rules, description", title=escape(c.description) or None)
    grid.columns[0].no_wrap = True
    for col in c.columns:
        shown = [col.physical_type] + (["required"] if col.required else [])
        if col.primary_key_position:
            shown.append(f"key#{col.primary_key_position}")
        if col.partition_position:
            shown.append(f"partition#{col.partition_position}")
        shown += [text for rule in rules() if col.rule(rule.name) is not None and (text := rule.show(col))]
        details = Text(" · ".join(shown), overflow="fold")  # a pattern folds, whole, rather than cut to …
        if col.description:
            details.append("\n" + col.description, style="dim")
        grid.add_row(Text(col.name), details)
    out.print(grid)


@app.command("diff")
def diff_cmd(
    old: Path = typer.Argument(..., parser=existing_file, help="Old contract YAML."),
    new: Path = typer.Argument(..., parser=existing_file, help="New contract YAML."),
) -> None:
    """Classify the changes from OLD to NEW; exit 1 when any is breaking."""
    from contracts.compat import diff_contracts
    from contracts.errors import ContractError
    from contracts.loader import read_contract

    try:
        a, b = read_contract(old), read_contract(new)
    except ContractError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        raise typer.Exit(2) from None
    changes = diff_contracts(a, b)
    if not changes:
        out.print(f"no changes ({a.name} {a.version} → {b.version})")
        return
    for change in changes:
        colour = "red" if change.breaking else "green"
        out.print(
            f"[{colour}]{'breaking' if change.breaking else 'compatible'}[/] {change.kind} "
            f"{escape(change.column or '')} {escape(change.detail)}",
            highlight=False,
        )
    if any(c.breaking for c in changes):
        bumped = b.major > a.major
        out.print(
            f"{a.name} {a.version} → {b.version}: breaking" + ("" if bumped else " — needs a major version bump"),
            highlight=False,
        )
        raise typer.Exit(1)


@app.command("lock")
def lock_cmd(
    force: bool = typer.Option(False, "--force", help="Rewrite even when the lock check fails."),
) -> None:
    """Record the current contracts as released (rewrite contracts/contracts.lock.json)."""
    from contracts.lock import check_lock, write_lock

    problems = check_lock()
    if problems and not force:
        for p in problems:
            console.print(f"[red]✗[/] {escape(str(p))}", highlight=False)
        console.print("fix the versions first, or pass --force to release anyway")
        raise typer.Exit(1)
    out.print(f"wrote {write_lock()}")
