"""``strata report``: one self-contained HTML page of a date range of the lake (see :mod:`strata.report.page`)."""

from __future__ import annotations

import datetime as dt

from warehouse.settings import Settings

#: The days a report covers by default: a week, ending with its last day.
WEEK = 7


def latest_day(settings: Settings) -> dt.date | None:
    """The latest event date ``dwd.request`` holds (None before the first DWD build): a report's default end."""
    from warehouse.storage.duck import lake_reader
    from warehouse.storage.lake import Lake
    from warehouse.tables import DWD_REQUEST

    if Lake(settings).open_table(DWD_REQUEST) is None:
        return None
    row = lake_reader(settings).sql(f"SELECT max(event_date) FROM delta_scan('{DWD_REQUEST.uri(settings)}')").fetchone()
    return row[0] if row else None
