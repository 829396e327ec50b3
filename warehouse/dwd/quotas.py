"""Tenant quotas: versioned reference data, so quota use is computed and re-computable.

``quotas.csv`` (tenant_id, effective_from, daily_request_quota, daily_token_quota) is
loaded into ``dwd.tenant_quota`` (one Delta version per load, like prices). The quota of
a tenant on a day is the row in effect that day (the latest ``effective_from`` on or
before it); an empty quota cell means no quota of that kind. ``ads.tenant_daily`` compares
each day's use with it.
"""

from __future__ import annotations

from pathlib import Path

from warehouse.settings import Settings
from warehouse.tables import DWD_TENANT_QUOTA


def load_quotas(settings: Settings, csv_path: Path) -> int:
    """Replace the quota table with the contents of ``csv_path``; returns the Delta version.

    The header names every column — a file without the quota columns would wipe every quota — and a
    file with a bad row changes nothing (see :mod:`warehouse.dwd.reference`).
    """
    from warehouse.dwd.reference import read_checked
    from warehouse.storage.lake import Lake
    from warehouse.storage.publish import publish

    frame = read_checked(csv_path, DWD_TENANT_QUOTA, "quota")
    result = publish(Lake(settings), DWD_TENANT_QUOTA, frame, mode="overwrite")
    assert result.version is not None
    return result.version
