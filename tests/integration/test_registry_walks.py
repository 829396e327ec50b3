"""Tables added at run time join erasure and retention through their contracts alone."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from contracts.loader import SEARCH_PATH_VARIABLE, clear_cache
from warehouse.ops.retention import apply_retention
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import table

CONTRACT = """\
apiVersion: v3.1.0
kind: DataContract
id: {id}
name: {name}
version: 1.0.0
status: active
description:
  purpose: A table a deployment added, with a user column.
team:
  name: test
customProperties:
  - property: layer
    value: {layer}
schema:
  - name: {short}
    physicalType: table
    properties:
      - name: {user_column}
        logicalType: string
        physicalType: string
        required: true
        classification: {classification}
        description: The user.
      - name: note
        logicalType: string
        physicalType: string
        description: Anything.
      - name: event_date
        logicalType: date
        physicalType: date32
        required: true
        partitioned: true
        partitionKeyPosition: 1
        description: Partition.
"""
DAYS = [dt.date(2026, 1, 1), dt.date(2026, 3, 1)]


@pytest.fixture
def added(tmp_path: Path, strata_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "more-contracts"
    folder.mkdir()
    for name, column, classification in (
        ("ads.user_notes", "user_pseudonym", "pseudonymous"),
        ("ods.support_tickets", "user_id", "pii"),
    ):
        layer, short = name.split(".")
        (folder / f"{name}.yaml").write_text(
            CONTRACT.format(
                id=name.replace(".", "_"),
                name=name,
                layer=layer,
                short=short,
                user_column=column,
                classification=classification,
            )
        )
    monkeypatch.setenv(SEARCH_PATH_VARIABLE, str(folder))
    clear_cache()
    yield folder
    clear_cache()


def _rows(column: str, users: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            column: users,
            "note": [f"note {i}" for i in range(len(users))],
            "event_date": [DAYS[i % 2] for i in range(len(users))],
        }
    )


def test_forget_reaches_a_table_added_with_a_classified_column(added: Path) -> None:
    settings = load_settings()
    key = settings.require_pseudonym_key()
    alice, bob = pseudonym(key, "alice"), pseudonym(key, "bob")
    notes, tickets = table("ads.user_notes"), table("ods.support_tickets")
    publish(
        Lake(settings), notes, _rows("user_pseudonym", [alice, bob, alice, bob]), mode="overwrite", expectations=False
    )
    publish(Lake(settings), tickets, _rows("user_id", ["alice", "bob", "alice"]), mode="overwrite", expectations=False)

    forgot = subprocess.run(
        [sys.executable, "-m", "strata.cli", "forget", "--user", "alice"],
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert forgot.returncode == 0, forgot.stderr
    assert "ads.user_notes: removed 2 row(s)" in forgot.stdout
    assert "ods.support_tickets: removed 2 row(s)" in forgot.stdout
    assert Lake(settings).read_frame(notes).get_column("user_pseudonym").to_list() == [bob, bob]
    assert Lake(settings).read_frame(tickets).get_column("user_id").to_list() == ["bob"]
    for root in (Path(notes.uri(settings)), Path(tickets.uri(settings))):
        text = repr([pq.read_table(p).to_pylist() for p in root.rglob("*.parquet")])
        text += "".join(p.read_text() for p in (root / "_delta_log").iterdir() if p.suffix == ".json")
        assert alice not in text and "'alice'" not in text
    # The rewrite kept the contract's exact types.
    assert Lake(settings).read(notes).schema.field("user_pseudonym").type == "string"


def test_retention_reaches_a_table_added_with_a_pii_column(added: Path) -> None:
    settings = load_settings()
    tickets = table("ods.support_tickets")
    publish(Lake(settings), tickets, _rows("user_id", ["a", "b", "c"]), mode="overwrite", expectations=False)
    deleted = apply_retention(settings, days=30, today=dt.date(2026, 3, 10))
    assert deleted["ods.support_tickets"] == 2
    assert "ads.user_notes" not in deleted  # pseudonymous features are not raw data
    assert Lake(settings).read_frame(tickets).get_column("event_date").to_list() == [DAYS[1]]
