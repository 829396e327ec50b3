"""Batch scoring of 1,000,000 users: features read → scores committed, against a bare pipeline.

The lake holds synthetic rows of ``dws.user_features``' shape for a million users (the
generator's population stops at 60,000) and a ``dwd.request`` row for each, so every one is
active on the day; the model is the project's own pipeline (imputer, scaler, logistic
regression) trained on a sample of those rows, exported to ONNX and registered.

- ours: ``strata model score`` — features as of the day's end read through the Delta log,
  batches streamed through one ONNX Runtime session with IO binding while the next batch is
  read, scores conformed, checked, audited and committed to ``ads.user_risk_scores``;
- baseline (named, same run, same rows): a bare hand-written pipeline — the same DuckDB
  feature read (``read_as_of``, one query per chunk of entities within the lake reader's
  memory), one ``session.run`` per batch, the scores written to a Parquet file;
- beside both: raw ``session.run`` rows/s on the features already in memory.

Target: ours at least 0.6× the bare pipeline's rows/s. ``STRATA_BENCH_PROVIDER=cuda`` (``make
bench-gpu``) runs both on the CUDA provider and says which provider ran.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import numpy as np
import polars as pl

from benchmarks.harness import Measurement, scaled

DAY = dt.date(2026, 3, 2)
USERS = scaled(1_000_000, 2_000)
BATCH = scaled(65_536, 512)
#: Training rows (the model is fitted on the first of them, half before the split, half after).
SAMPLE = min(50_000, USERS)


def _lake(workdir: Path):
    from benchmarks.synthetic import feature_rows, pseudonyms, request_rows
    from tests.small_model import feature_names, fit_user_risk
    from warehouse.settings import load_settings
    from warehouse.storage.lake import Lake
    from warehouse.storage.publish import publish
    from warehouse.tables import DWD_REQUEST, table

    settings = load_settings(
        {"STRATA_HOME": str(workdir / "home"), "STRATA_PSEUDONYM_KEY": "benchmark-only-key-0123456789"}
    )
    source = table("dws.user_features")
    keys = pseudonyms(USERS, seed=1)
    features = feature_rows(source, keys, DAY, seed=2)
    lake = Lake(settings)
    publish(lake, source, features, partitions=[{"event_date": DAY}], expectations=False, checked=True)
    publish(lake, DWD_REQUEST, request_rows(keys, DAY), partitions=[{"event_date": DAY}], expectations=False)
    abusive = pl.col(feature_names()[0]).rank() / SAMPLE + pl.Series(np.random.default_rng(3).random(SAMPLE)) > 1.0
    fit_user_risk(settings, features.head(SAMPLE), abusive, (DAY, DAY))
    return settings


def _bare(settings, provider: str, out: Path) -> tuple[float, int, str]:
    """The hand-written pipeline: DuckDB reads the features, one session.run per batch, Parquet out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from batch_inference.features import active_entities, read_as_of
    from batch_inference.registry import get
    from batch_inference.session import open_session
    from warehouse.storage.lake import Lake
    from warehouse.tables import table

    started = time.perf_counter()
    model = get(settings, "user_risk")
    session = open_session(model.onnx_bytes(), provider)  # type: ignore[arg-type]
    names = [f.name for f in model.card.features]
    lake = Lake(settings)
    entities = active_entities(lake, DAY, "user_pseudonym", range(16))
    reader = read_as_of(
        lake,
        table("dws.user_features"),
        "user_pseudonym",
        names,
        entities,
        dt.datetime(2026, 3, 3, tzinfo=dt.UTC),
        dt.timedelta(days=8),
        BATCH,
    )
    rows = 0
    with pq.ParquetWriter(out, pa.schema([("user_pseudonym", pa.string()), ("score", pa.float32())])) as writer:
        for batch in reader:
            x = np.column_stack(
                [pc.cast(batch.column(n), pa.float32(), safe=False).to_numpy(zero_copy_only=False) for n in names]
            )
            scores = session.session.run([session.output_name], {session.input_name: x})[0][:, 1]
            writer.write_batch(pa.record_batch({"user_pseudonym": batch.column(0), "score": pa.array(scores)}))
            rows += batch.num_rows
    return time.perf_counter() - started, rows, session.provider


def _raw(settings, provider: str) -> float:
    """Rows/s of session.run alone, on features already in memory."""
    from batch_inference.registry import get
    from batch_inference.session import open_session

    model = get(settings, "user_risk")
    session = open_session(model.onnx_bytes(), provider)  # type: ignore[arg-type]
    x = np.random.default_rng(0).random((USERS, len(model.card.features)), dtype=np.float32)
    session.warm_up()
    started = time.perf_counter()
    for low in range(0, USERS, BATCH):
        session.session.run([session.output_name], {session.input_name: x[low : low + BATCH]})
    return USERS / (time.perf_counter() - started)


def run(workdir: Path) -> list[Measurement]:
    from batch_inference.scoring import score

    provider = os.environ.get("STRATA_BENCH_PROVIDER", "cpu")
    settings = _lake(workdir)
    bare_before = _bare(settings, provider, workdir / "bare.parquet")
    started = time.perf_counter()
    report = score(settings, "user_risk", DAY, provider=provider, batch_rows=BATCH)  # type: ignore[arg-type]
    ours_s = time.perf_counter() - started
    bare_after = _bare(settings, provider, workdir / "bare.parquet")
    bare_s = (bare_before[0] + bare_after[0]) / 2
    assert report.entities == bare_before[1] == USERS
    label = f"({report.provider})"
    return [
        Measurement(
            f"scoring 1M users, features read → scores committed {label}",
            USERS / ours_s,
            "rows/s",
            "bare: DuckDB features → session.run per batch → Parquet",
            USERS / bare_s,
            target_ratio=0.6,
        ),
        Measurement(
            f"session.run alone on in-memory rows {label}",
            _raw(settings, provider),
            "rows/s",
            "bare pipeline",
            USERS / bare_s,
        ),
    ]
