"""Labels: the latest feedback per request, joined at build time and merged in when late."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow.compute as pc

from warehouse.storage.lake import Lake
from warehouse.storage.publish import republish
from warehouse.tables import DWD_FEEDBACK, DWD_REQUEST


def latest_labels(lake: Lake, request_ids: pl.Series | None = None) -> pl.DataFrame:
    """The latest feedback per request id (kind, value, ts) from ``dwd.feedback``."""
    schema: dict[str, pl.DataType] = {
        "request_id": pl.String(),
        "feedback_kind": pl.String(),
        "feedback_value": pl.String(),
        "feedback_ts": pl.Datetime("us", "UTC"),
    }
    if lake.open_table(DWD_FEEDBACK) is None:
        return pl.DataFrame(schema=schema)
    fb = lake.read_frame(DWD_FEEDBACK, columns=["request_id", "kind", "value", "ts"])
    if request_ids is not None:
        fb = fb.filter(pl.col("request_id").is_in(request_ids.implode()))
    return (
        fb.sort(["ts", "kind", "value"])
        .group_by("request_id")
        .last()
        .rename({"kind": "feedback_kind", "value": "feedback_value", "ts": "feedback_ts"})
        .select(list(schema))
    )


def merge_labels(lake: Lake, feedback_day: dt.date) -> int:
    """Apply feedback that arrived on ``feedback_day`` to the requests it labels.

    Returns the number of request rows updated. The label set is the latest over all
    feedback, so merging in any order, or twice, gives the same rows. The partitions holding
    labelled requests are rewritten through the publish path (their exact types kept), under
    the table's exclusive lock: a request build running meanwhile either finishes first (and
    its rows are labelled here) or starts after (and reads these labels itself).
    """
    with lake.hold(write=[(DWD_REQUEST, None)], read=[DWD_FEEDBACK]):
        if lake.open_table(DWD_REQUEST) is None:
            return 0
        fb = lake.read_frame(DWD_FEEDBACK, columns=["request_id"], filters=[("event_date", "=", feedback_day)])
        labels = latest_labels(lake, fb.get_column("request_id").unique())
        if labels.is_empty():
            return 0
        columns = ["request_id", "event_date", *_LABEL_COLUMNS]
        labelled = pl.from_arrow(
            lake.snapshot(DWD_REQUEST).to_table(
                columns=columns, filter=pc.field("request_id").isin(labels.get_column("request_id").to_list())
            )
        )
        assert isinstance(labelled, pl.DataFrame)
        stale = labelled.join(labels, on="request_id", suffix="_new").filter(
            pl.any_horizontal(pl.col(c).ne_missing(pl.col(f"{c}_new")) for c in _LABEL_COLUMNS)
        )
        if stale.is_empty():
            return 0

        def relabel(rows: pl.DataFrame) -> pl.DataFrame:
            update = rows.select("request_id").join(
                labels.with_columns(_has=pl.lit(True)), on="request_id", how="left", maintain_order="left"
            )
            have = update.get_column("_has").fill_null(False)
            return rows.with_columns(
                pl.when(have).then(update.get_column(c)).otherwise(pl.col(c)).alias(c) for c in _LABEL_COLUMNS
            )

        republish(lake, DWD_REQUEST, relabel, stale.select("event_date").unique().to_dicts())
        return stale.height


_LABEL_COLUMNS = ["feedback_kind", "feedback_value", "feedback_ts"]
