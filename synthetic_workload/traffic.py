"""When traffic happens: the diurnal curve, the abusers' odd-hours curve, retry storms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthetic_workload.population import Population

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US


def _bump(center: float, width: float) -> np.ndarray:
    h = np.arange(24) + 0.5
    d = np.abs(h - center)
    d = np.minimum(d, 24 - d)
    return np.exp(-((d / width) ** 2))


#: UTC load of a global service: Asia morning (~03 UTC) and Americas/Europe afternoon (~15 UTC).
BASE_CURVE = 0.18 + 0.7 * _bump(3.0, 3.0) + 1.0 * _bump(15.0, 3.5)
#: Abusive traffic peaks when the service is quiet.
ABUSE_CURVE = 0.15 + _bump(9.5, 2.5) + 0.6 * _bump(21.5, 1.5)


def diurnal_weights(rng: np.random.Generator) -> np.ndarray:
    """Hourly weights of normal traffic for one day (the base curve with ±5% daily noise)."""
    w = BASE_CURVE * rng.lognormal(0.0, 0.05, 24)
    return w / w.sum()


def abuse_weights() -> np.ndarray:
    """Hourly weights of abusive traffic (odd hours)."""
    return ABUSE_CURVE / ABUSE_CURVE.sum()


@dataclass(frozen=True)
class Storm:
    """A retry storm: one tenant's client retries aggressively in a short window."""

    tenant: int
    start_us: int
    end_us: int


def storm_for_day(rng: np.random.Generator, pop: Population, day_index: int, day_start_us: int) -> Storm | None:
    """The day's retry storm, if any: always on the first day, then on ~40% of days."""
    if day_index > 0 and rng.random() >= 0.4:
        return None
    top = np.argsort(-pop.tenant_weights, kind="stable")[:5]
    tenant = int(top[rng.integers(0, len(top))])
    start = day_start_us + int(rng.integers(6 * HOUR_US, 20 * HOUR_US))
    return Storm(tenant, start, start + int(rng.integers(10, 26)) * 60_000_000)
