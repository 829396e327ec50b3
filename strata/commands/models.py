"""``strata model …``: train, list, show and score with registered ONNX models."""

from __future__ import annotations

import typer
from rich.markup import escape

from strata.console import FitTable, out, plain, progress
from strata.options import WAIT, for_writing, parse_date

app = typer.Typer(help="ONNX models: train from Feast, register, score entities in batch.", no_args_is_help=True)


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not i/n, e.g. 0/4", param_hint="--shard") from None
    return index, count


@app.command("train")
def train_cmd(
    name: str = typer.Option("user_risk", "--name", help="Model name."),
    until: str = typer.Option(..., "--until", help="Last day of the training window, YYYY-MM-DD."),
    days: int = typer.Option(7, "--days", min=2, help="Days in the training window."),
    wait: float | None = WAIT,
) -> None:
    """Train a model from a Feast training set, check ONNX parity and quality, register a new version."""
    from strata import pipeline

    result = pipeline.train(for_writing(wait), parse_date(until, "--until"), name=name, days=days)
    card = result.detail.card
    out.print(
        f"registered {card.ref}: ROC AUC {card.metrics['roc_auc']:.3f} on the later split, parity "
        f"{card.metrics['parity_max_abs']:.1e}, {len(card.features)} features, threshold {card.threshold:.3f}"
    )


@app.command("list")
def list_cmd() -> None:
    """Every registered model version."""
    from batch_inference.registry import list_models
    from warehouse.settings import load_settings

    listed = list_models(load_settings())
    if not listed:
        out.print("no model registered yet (strata model train --until YYYY-MM-DD)")
        return
    rows = []
    for entry in listed:
        card = entry.card
        if card is None:
            rows.append([entry.name, entry.version, "", "unusable: see below", "", "", ""])
            continue
        rows.append(
            [
                card.name,
                card.version,
                card.created_at,
                " … ".join(card.training_window),
                f"{card.metrics.get('roc_auc', float('nan')):.3f}",
                str(len(card.features)),
                card.sha256[:12],
            ]
        )
    columns = ["model", "version", "created (UTC)", "window", "ROC AUC", "features", "sha256"]
    out.print(FitTable(columns, rows, drop=["sha256", "created (UTC)", "features"]))
    for entry in listed:
        if entry.problem:
            out.print(f"[red]unusable[/] {escape(entry.problem)}")


@app.command("show")
def show_cmd(
    ref: str = typer.Argument(..., help="NAME or NAME@VERSION"),
    as_json: bool = typer.Option(False, "--json", help="The whole card as registered (model.json)."),
) -> None:
    """A model version's card: features, feature service, window, metrics, libraries, hash."""
    from rich.table import Table

    from batch_inference.registry import get
    from warehouse.settings import load_settings

    name, _, version = ref.partition("@")
    model = get(load_settings(), name, version or None)
    card = model.card
    if as_json:
        out.print(escape(card.to_json()), end="")
        return
    dtypes = sorted({f.dtype for f in card.features})
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in (
        ("model", f"{card.ref}, created {card.created_at}"),
        ("scores", f"{card.entity} from {card.source_table} (feature service {card.feature_service})"),
        ("trained on", " … ".join(card.training_window)),
        ("metrics", " · ".join(f"{k} {plain(v)}" for k, v in sorted(card.metrics.items()))),
        ("threshold", plain(card.threshold)),
        ("features", f"{len(card.features)} ({', '.join(dtypes)}): " + ", ".join(f.name for f in card.features)),
        ("libraries", " · ".join(f"{k} {v}" for k, v in sorted(card.libraries.items()))),
        ("sha256", f"model {card.sha256[:16]}…, card {card.card_sha256[:16]}…"),
        ("files", str(model.path)),
    ):
        grid.add_row(label, escape(value))
    out.print(grid)
    out.print("[dim]--json prints the whole card[/]")


@app.command("score")
def score_cmd(
    day: str = typer.Option(..., "--date", help="Day to score (users active on it), YYYY-MM-DD."),
    name: str = typer.Option("user_risk", "--name", help="Model name."),
    version: str | None = typer.Option(None, "--version", help="Model version (default: the latest)."),
    shard: str = typer.Option("0/1", "--shard", help="i/n: score entity buckets of shard i of n (n divides 16)."),
    batch_size: int = typer.Option(65_536, "--batch-size", min=1, help="Rows per inference batch."),
    provider: str = typer.Option("auto", "--provider", help="auto (CUDA, else CPU), cuda or cpu."),
    wait: float | None = WAIT,
) -> None:
    """Score every entity active on a day into ads.user_risk_scores (and ads.score_daily)."""
    from strata import pipeline

    if provider not in ("auto", "cuda", "cpu"):
        raise typer.BadParameter(f"{provider!r} is not auto, cuda or cpu", param_hint="--provider")
    with progress(f"scoring {day}") as step:
        result = pipeline.score(
            for_writing(wait),
            parse_date(day),
            name=name,
            version=version,
            shard=_shard(shard),
            batch_rows=batch_size,
            provider=provider,  # type: ignore[arg-type]
            progress=step,
        )
    report = result.detail
    out.print(
        f"scored {report.entities:,} user(s) with {report.model}@{report.version} on {report.provider}, "
        f"shard {report.shard[0]}/{report.shard[1]}: ads.user_risk_scores v{report.version_written}"
    )
