"""``strata prices load``, ``strata quotas load``: reference data the builds need (model prices, tenant quotas)."""

from __future__ import annotations

from pathlib import Path

import typer

from strata.console import out
from strata.options import WAIT, existing_file, for_writing

app = typer.Typer()
prices_app = typer.Typer(help="Model price reference data.", no_args_is_help=True)
app.add_typer(prices_app, name="prices")
quotas_app = typer.Typer(help="Tenant quota reference data.", no_args_is_help=True)
app.add_typer(quotas_app, name="quotas")


@prices_app.command("load")
def prices_load_cmd(
    csv_path: Path = typer.Argument(..., parser=existing_file, help="prices.csv"), wait: float | None = WAIT
) -> None:
    """Load a price list (model, effective_from, prices per 1k tokens[, bills_refusals]) as a new version."""
    from strata import pipeline

    result = pipeline.load_prices(for_writing(wait), csv_path)
    for table, version in result.versions.items():
        out.print(f"{table} is now version {version}")


@quotas_app.command("load")
def quotas_load_cmd(csv_path: Path = typer.Argument(..., parser=existing_file, help="quotas.csv")) -> None:
    """Load tenant quotas (tenant_id, effective_from, daily_request_quota, daily_token_quota) as a new version."""
    from strata import pipeline
    from warehouse.settings import load_settings

    result = pipeline.load_quotas(load_settings(), csv_path)
    for table, version in result.versions.items():
        out.print(f"{table} is now version {version}")
