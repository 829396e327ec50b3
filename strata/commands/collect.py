"""``strata collect``: receive OpenTelemetry traces over OTLP/HTTP into the landing zone."""

from __future__ import annotations

import typer

from strata.console import out

app = typer.Typer()


@app.command("collect")
def collect_cmd(
    host: str = typer.Option(None, help="Address to listen on (default STRATA_COLLECT_HOST, else 127.0.0.1)."),
    port: int = typer.Option(
        None, min=1, max=65535, help="Port to listen on (default STRATA_COLLECT_PORT, else 4318)."
    ),
    workers: int = typer.Option(
        None, min=1, help="Processes serving the port (default STRATA_COLLECT_WORKERS, else 1)."
    ),
) -> None:
    """Receive OTLP/HTTP traces (POST /v1/traces, protobuf or JSON) until stopped. Needs no Airflow.

    Closed spool segments are moved to the landing zone, where the next ingest converts them to OTLP/JSON
    and lands them.
    """
    import dataclasses

    from warehouse.settings import load_collect_settings, load_settings
    from warehouse.sources.collector.receiver import serve

    settings, collect = load_settings(), load_collect_settings()
    collect = dataclasses.replace(
        collect, host=host or collect.host, port=port or collect.port, workers=workers or collect.workers
    )
    scheme = "https" if collect.tls_cert else "http"
    serve(
        settings,
        collect,
        announce=lambda: out.print(  # once its settings and address are checked
            f"strata collect: OTLP/HTTP traces on {scheme}://{collect.host}:{collect.port}/v1/traces → "
            f"{settings.landing_dir / 'otlp'}" + (" (bearer tokens required)" if collect.tokens_file else "")
        ),
    )
