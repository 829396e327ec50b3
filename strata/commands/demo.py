"""``strata generate`` and ``strata demo``: realistic data, and the pipeline run end to end on it."""

from __future__ import annotations

from pathlib import Path

import typer

from strata.console import out, say
from strata.options import given_path, parse_date

app = typer.Typer()


@app.command("generate")
def generate_cmd(
    out_dir: Path = typer.Option(
        ..., "--out", parser=given_path, metavar="FOLDER", help="Folder to write the dataset into."
    ),
    days: int = typer.Option(1, "--days", min=1, help="Number of days of traffic."),
    requests_per_day: int = typer.Option(10_000, "--requests-per-day", min=1, help="Distinct requests per day."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same bytes."),
    start: str | None = typer.Option(None, "--start", help="First day, YYYY-MM-DD (default: 2026-01-01)."),
    fault_rate: float = typer.Option(0.0, "--fault-rate", min=0.0, max=0.5, help="Share of malformed lines to mix in."),
) -> None:
    """Write realistic AI-service request logs, feedback, prices, tenant quotas and a ground-truth manifest."""
    import datetime as dt

    from strata.demo import generate_with_progress

    start_day = parse_date(start, "--start") if start else dt.date(2026, 1, 1)
    manifest = generate_with_progress(
        out_dir, start=start_day, days=days, requests_per_day=requests_per_day, seed=seed, fault_rate=fault_rate
    )
    total_lines = sum(day["lines"] for day in manifest["days"].values())
    out.print(
        f"wrote {len(manifest['files'])} files, {total_lines:,} request lines over {days} day(s) "
        f"to {out_dir} (manifest: {out_dir / 'manifest.json'})"
    )


demo_app = typer.Typer(help="Generate a week of logs and run the real DAGs on it, under STRATA_HOME/demo.")
app.add_typer(demo_app, name="demo")


@demo_app.callback(invoke_without_command=True)
def demo_cmd(
    ctx: typer.Context,
    days: int = typer.Option(7, "--days", min=1, help="Days of traffic to generate."),
    requests_per_day: int = typer.Option(
        30_000, "--requests-per-day", min=1, help="Requests per day (30,000 plants 11 abusive users in a week)."
    ),
    seed: int = typer.Option(7, "--seed", help="Random seed."),
    reset: bool = typer.Option(False, "--reset", help="Remove the demo's corner (lake, files, key) and start over."),
) -> None:
    """Generate a week of logs and run the real DAGs through Airflow, day by day, under STRATA_HOME/demo.

    The traffic ends four days ago and its late feedback yesterday (a re-run reuses its dates). `strata demo
    env`: the shell line to use its lake.
    """
    from strata.demo import reset as reset_demo
    from strata.demo import run_demo
    from warehouse.settings import load_settings

    if ctx.invoked_subcommand is not None:
        return
    settings = load_settings()
    if reset:
        out.print(f"  removed the demo's corner {reset_demo(settings)}: starting over")
    if not run_demo(settings, days=days, requests_per_day=requests_per_day, seed=seed, echo=say):
        raise typer.Exit(1)


@demo_app.command("env")
def env_cmd() -> None:
    """Print one line to `eval` in a shell: the demo's STRATA_HOME and key, and `strata` on the PATH."""
    from strata.demo import env_line
    from warehouse.settings import load_settings

    print(env_line(load_settings()))
