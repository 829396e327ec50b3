"""Labels: the latest feedback per request, joined at build time and merged in when late."""

from __future__ import annotations

import datetime as dt

import polars as pl

from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.tables import DWD_FEEDBACK, DWD_REQUEST


def latest_labels(settings: Settings, request_ids: pl.Series | None = None) -> pl.DataFrame:
    """The latest feedback per request id (kind, value, ts) from ``dwd.feedback``."""
    schema: dict[str, pl.DataType] = {"request_id": pl.String(), "feedback_kind": pl.String(),
                                      "feedback_value": pl.String(), "feedback_ts": pl.Datetime("us", "UTC")}
    if lake.open_table(settings, DWD_FEEDBACK) is None:
        return pl.DataFrame(schema=schema)
    fb = lake.read_frame(settings, DWD_FEEDBACK, columns=["request_id", "kind", "value", "ts"])
    if request_ids is not None:
        fb = fb.filter(pl.col("request_id").is_in(request_ids.implode()))
    return (fb.sort(["ts", "kind", "value"]).group_by("request_id").last()
            .rename({"kind": "feedback_kind", "value": "feedback_value", "ts": "feedback_ts"})
            .select(list(schema)))


def merge_labels(settings: Settings, feedback_day: dt.date) -> int:
    """Apply feedback that arrived on ``feedback_day`` to the requests it labels (Delta MERGE).

    Returns the number of request rows updated. The label set is the latest over all
    feedback, so merging in any order, or twice, gives the same rows.
    """
    target = lake.open_table(settings, DWD_REQUEST)
    if target is None:
        return 0
    fb = lake.read_frame(settings, DWD_FEEDBACK, columns=["request_id"], filters=[("event_date", "=", feedback_day)])
    assert isinstance(fb, pl.DataFrame)
    labels = latest_labels(settings, fb.get_column("request_id").unique())
    if labels.is_empty():
        return 0
    stats = (
        target.merge(labels.to_arrow(), predicate="t.request_id = s.request_id", source_alias="s", target_alias="t")
        .when_matched_update(
            updates={"feedback_kind": "s.feedback_kind", "feedback_value": "s.feedback_value",
                     "feedback_ts": "s.feedback_ts"},
            predicate="(t.feedback_ts IS DISTINCT FROM s.feedback_ts) OR (t.feedback_kind IS DISTINCT FROM "
                      "s.feedback_kind) OR (t.feedback_value IS DISTINCT FROM s.feedback_value)",
        )
        .execute()
    )
    return int(stats.get("num_target_rows_updated", 0))
