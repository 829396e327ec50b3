"""A model's card is covered by a hash as its ONNX file is: an edited or unreadable card is refused by name."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batch_inference.registry import BadCard, Feature, ModelCard, get, list_models, register
from batch_inference.scoring import score
from strata.commands.models import app
from warehouse.settings import Settings, load_settings

CARD = ModelCard(
    name="user_risk",
    version="",
    features=(Feature("a_1h", "float32"), Feature("b_1h", "float32")),
    feature_service="user_risk_v1",
    entity="user_pseudonym",
    training_window=("2026-01-01", "2026-01-06"),
    metrics={"roc_auc": 0.8},
    sha256="",
    libraries={},
    threshold=0.7,
    created_at="2026-01-07T00:00:00Z",
)


def _edit(settings: Settings, version: str, text: str) -> None:
    card = settings.registry_dir / "user_risk" / version / "model.json"
    card.chmod(0o644)
    card.write_text(text)


@pytest.mark.parametrize("change", ["reordered features", "threshold 0"])
def test_an_edited_card_is_refused_by_scoring(strata_env: Path, change: str) -> None:
    settings = load_settings()
    version = register(settings, CARD, b"onnx bytes").card.version
    assert get(settings, "user_risk", version).card.threshold == 0.7  # a card as registered loads
    doc = json.loads((settings.registry_dir / "user_risk" / version / "model.json").read_text())
    if change == "threshold 0":
        doc["threshold"] = 0
    else:
        doc["features"].reverse()
    _edit(settings, version, json.dumps(doc))
    with pytest.raises(BadCard, match=f"user_risk@{version}: its model.json changed after registration.*re-train"):
        score(settings, "user_risk", dt.date(2026, 1, 8), version=version, provider="cpu")


def test_model_show_prints_a_card_that_fits_80_columns(strata_env: Path) -> None:
    settings = load_settings()
    register(settings, CARD, b"onnx bytes")
    shown = CliRunner().invoke(app, ["show", "user_risk"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert len(lines) <= 20 and max(map(len, lines)) <= 80
    assert "user_risk@v1" in shown.output and "2026-01-01 … 2026-01-06" in shown.output
    assert "roc_auc 0.8" in shown.output and "a_1h, b_1h" in shown.output
    whole = CliRunner().invoke(app, ["show", "user_risk@v1", "--json"])
    assert json.loads(whole.output)["threshold"] == 0.7


def test_model_list_names_each_bad_version_and_lists_the_good(strata_env: Path) -> None:
    settings = load_settings()
    for _ in range(3):
        register(settings, CARD, b"onnx bytes")
    _edit(settings, "v1", "{not json")
    old = json.loads((settings.registry_dir / "user_risk" / "v3" / "model.json").read_text())
    del old["card_sha256"]  # a card registered before cards were hashed
    _edit(settings, "v3", json.dumps(old))
    assert [(e.version, e.card is not None) for e in list_models(settings)] == [
        ("v1", False),
        ("v2", True),
        ("v3", False),
    ]
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "unusable user_risk@v1: its model.json is not a model card (JSONDecodeError" in result.output
    assert "unusable user_risk@v3: its model.json has no card_sha256" in result.output
    assert "0.800" in result.output  # v2's row
    narrow = CliRunner().invoke(app, ["list"], env={"COLUMNS": "80"}).output
    table = narrow.split("unusable user_risk@v1")[0].splitlines()  # the table; the problems below fold
    assert max(map(len, table)) <= 80 and "2026-01-01 … 2026-01-06" in narrow and "0.800" in narrow
    assert "not shown at 80 columns: created (UTC), sha256" in narrow


def test_the_scoring_task_fails_on_an_unusable_model_instead_of_waiting_for_one(strata_env: Path) -> None:
    from strata.orchestration import tasks

    settings = tasks.task_settings()
    register(settings, CARD, b"onnx bytes")
    _edit(settings, "v1", "[]")
    with pytest.raises(BadCard, match=r"user_risk@v1: its model\.json is not a model card"):
        tasks.shards("score")
