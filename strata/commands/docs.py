"""``strata docs``: the ADS dbt project's documentation, as one static page."""

from __future__ import annotations

import typer

from strata.console import out, progress

app = typer.Typer()


@app.command("docs")
def docs_cmd() -> None:
    """Generate the documentation site of the ADS tables (dbt docs) and say where it is."""
    from strata import pipeline
    from warehouse.settings import load_settings

    with progress("ADS docs") as step:  # dbt's start, its models created empty, the catalog: ~16 s
        page = pipeline.generate_docs(load_settings(), progress=step).detail
    out.print(f"ADS documentation: {page}")
    out.print(f"  open it in a browser: file://{page}")
