"""``strata docs``: the ADS dbt project's documentation, as one static page."""

from __future__ import annotations

import typer

from strata.console import out

app = typer.Typer()


@app.command("docs")
def docs_cmd() -> None:
    """Generate the documentation site of the ADS tables (dbt docs) and say where it is."""
    from strata import pipeline
    from warehouse.settings import load_settings

    page = pipeline.generate_docs(load_settings()).detail
    out.print(f"ADS documentation: {page}")
    out.print(f"  open it in a browser: file://{page}")
