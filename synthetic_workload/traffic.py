"""When traffic happens: the diurnal curve, the abusers' odd-hours curve, retry storms, and the
operator patterns planted in a run (server instances and their warm-ups, a drifting server, a
token jump, retry policy violations, a busy 10-minute peak per day)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from synthetic_workload import ids
from synthetic_workload.catalog import FAMILIES, MODELS, SERVER_IS_SPARE, SERVER_OFFSET, SERVERS
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
    """The day's retry storm, if any: always on the first day, then on ~40% of days; in busy hours,
    where the tenant sends enough first attempts for its retries (at most 2 each) to stand out."""
    if day_index > 0 and rng.random() >= 0.4:
        return None
    top = np.argsort(-pop.tenant_weights, kind="stable")[:5]
    tenant = int(top[rng.integers(0, len(top))])
    start = day_start_us + int(rng.integers(11 * HOUR_US, 19 * HOUR_US))
    return Storm(tenant, start, start + int(rng.integers(10, 26)) * 60_000_000)


MINUTE_US = 60_000_000
#: Requests an instance started during the run serves slowly while it warms up, and how slowly.
WARMUP_REQUESTS = 50
WARMUP_FACTOR = (5.0, 10.0)
INSTANCE_KINDS: tuple[str, ...] = ("initial", "deploy", "scale_up", "restart")
KIND_INITIAL, KIND_DEPLOY, KIND_SCALE_UP, KIND_RESTART = range(4)
#: Attempts of a retry chain at most, planted unbounded chains aside (they take 5–8).
MAX_ATTEMPTS = 3
UNBOUNDED_ATTEMPTS = (5, 8)
#: Input tokens per request of the token-jump tenant on its day, × this.
TOKEN_JUMP_FACTOR = 3.0
#: Share of invalid requests the non-retryable-retry tenant sends to its model on its day.
NON_RETRYABLE_INVALID_RATE = 0.08
#: A drifting instance's latency just before its restart, × this (drawn).
DRIFT_SLOWDOWN = (2.5, 3.0)
PEAK_MINUTES = 10
#: A peak's first-attempt rate is this (drawn) × its surrounding rate, the rate in the 30 minutes
#: either side; the requests moved in come from the rest of its shard.
PEAK_MULTIPLIER = (3.3, 3.7)
PEAK_SURROUNDING_MINUTES = 30
_NS_INSTANCE = 13  # an ids namespace no other id uses
_FAM_SERVERS = np.array([f.servers for f in FAMILIES])
#: Families busy enough per server that a drift shows over a day.
_DRIFT_FAMILIES = ("vllm-eu", "gw-azure")


@dataclass(frozen=True, eq=False)
class Fleet:
    """The run's server instances (one process lifetime each), sorted by (server, start).

    A server runs one instance at a time: its first from before the run, later ones from each
    planted start. A family's spare server has no instance until a scale-up starts one.
    """

    server: np.ndarray  # int16 server code per instance
    start_us: np.ndarray
    kind: np.ndarray  # INSTANCE_KINDS code
    warmup: np.ndarray  # latency factor of the first WARMUP_REQUESTS (1.0: not slowed)
    names: tuple[str, ...]
    scale_family: int  # the family scaled up (-1: none), from scale_us on
    scale_us: int

    def instance_of(self, server: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
        """The instance serving each (server, time)."""
        keys = (self.server.astype(np.int64) << 52) | self.start_us
        return np.searchsorted(keys, (server.astype(np.int64) << 52) | ts_us, side="right") - 1

    def active_servers(self, family: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
        """How many of each family's servers serve at each time (the spare once scaled up)."""
        return _FAM_SERVERS[family] + ((family == self.scale_family) & (ts_us >= self.scale_us))


@dataclass(frozen=True)
class Drift:
    """A server's instance slowing down with the work it does, until a restart replaces it."""

    day: int
    instance: int  # the drifting instance (the next one starts at restart_us)
    start_us: int
    restart_us: int
    slowdown: float  # latency factor just before the restart


@dataclass(frozen=True)
class TenantDay:
    """A tenant's planted behaviour on one day, on one model."""

    day: int
    tenant: int
    model: int


@dataclass(frozen=True)
class Peak:
    """A model's busy 10 minutes of one day: its first attempts there × ``multiplier``."""

    model: int
    start_us: int
    multiplier: float


@dataclass(frozen=True, eq=False)
class RunPlan:
    """The operator patterns planted in a run (see the module docstring)."""

    fleet: Fleet
    drift: Drift | None
    token_jump: TenantDay | None
    non_retryable: TenantDay | None
    unbounded: TenantDay | None
    unbounded_at: np.ndarray  # when each unbounded chain is planned (one per 3-hour shard of its day)
    unbounded_attempts: np.ndarray  # ... and its attempts
    peaks: tuple[Peak, ...]  # one per day


def _busy_start(rng: np.random.Generator, day_start_us: int) -> int:
    """A planted start early in the 15:00–18:00 shard, so its warm-up fits in the shard."""
    return day_start_us + 15 * HOUR_US + int(rng.integers(5 * MINUTE_US, 60 * MINUTE_US))


def plan_run(pop: Population, *, seed: int, start: dt.date, days: int) -> RunPlan:
    """Draw the run's planted patterns (deterministic in seed, scale and days)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7, days]))
    run_start = (start - dt.date(1970, 1, 1)).days * DAY_US
    day_start = [run_start + i * DAY_US for i in range(days)]
    regular = np.flatnonzero(~SERVER_IS_SPARE)
    starts = [(int(s), run_start - int(rng.integers(2 * DAY_US, 30 * DAY_US)), KIND_INITIAL, 1.0) for s in regular]

    def warm() -> float:
        return round(float(rng.uniform(*WARMUP_FACTOR)), 2)

    drift = None
    drift_day = min(2, days - 1)
    drift_server = -1
    if drift_day >= 1:
        busy = [s for s in regular if FAMILIES[SERVERS[s][0]].name in _DRIFT_FAMILIES]
        drift_server = int(rng.choice(busy))
        begin = day_start[drift_day] + int(rng.integers(20 * MINUTE_US, 60 * MINUTE_US))
        restart = _busy_start(rng, day_start[drift_day])
        starts += [(drift_server, begin, KIND_DEPLOY, warm()), (drift_server, restart, KIND_RESTART, warm())]
        drift = Drift(drift_day, -1, begin, restart, round(float(rng.uniform(*DRIFT_SLOWDOWN)), 2))
    scale_day = min(1, days - 1)
    scale_family = int(rng.integers(len(FAMILIES)))
    scale_us = _busy_start(rng, day_start[scale_day])
    spare = int(SERVER_OFFSET[scale_family]) + FAMILIES[scale_family].servers
    starts.append((spare, scale_us, KIND_SCALE_UP, warm()))
    others = regular[regular != drift_server]
    for i in range(days):
        starts.append((int(rng.choice(others)), _busy_start(rng, day_start[i]), KIND_DEPLOY, warm()))

    starts.sort(key=lambda x: (x[0], x[1]))
    server = np.array([x[0] for x in starts], dtype=np.int16)
    tags = ids.mix64(np.arange(len(starts), dtype=np.uint64), ids.seed_key(seed, _NS_INSTANCE)) >> np.uint64(32)
    fleet = Fleet(
        server=server,
        start_us=np.array([x[1] for x in starts], dtype=np.int64),
        kind=np.array([x[2] for x in starts], dtype=np.int8),
        warmup=np.array([x[3] for x in starts]),
        names=tuple(f"{SERVERS[s][1]}-{t:08x}" for s, t in zip(server.tolist(), tags.tolist())),
        scale_family=scale_family,
        scale_us=scale_us,
    )
    if drift is not None:
        index = int(fleet.instance_of(np.array([drift_server]), np.array([drift.start_us]))[0])
        drift = Drift(drift.day, index, drift.start_us, drift.restart_us, drift.slowdown)

    # tenants below the storm candidates (their counts stay steady), each busy enough to stand out
    ranked = np.argsort(-pop.tenant_weights, kind="stable")[5:10]
    t_jump, t_400, t_loop = (int(t) for t in rng.choice(ranked, 3, replace=False))

    def tenant_day(day: int, tenant: int) -> TenantDay:
        return TenantDay(day, tenant, int(np.argmax(pop.tenant_model_mix[tenant])))

    token_jump = tenant_day(int(rng.integers(4, days)), t_jump) if days >= 5 else None
    pool = rng.permutation(np.arange(1, days) if days >= 3 else np.arange(days))
    non_retryable = tenant_day(int(pool[0]), t_400)
    unbounded = tenant_day(int(pool[1]), t_loop) if len(pool) > 1 else None
    loop_day = day_start[unbounded.day] if unbounded is not None else 0
    unbounded_at = loop_day + np.arange(1, 24, 3) * HOUR_US + rng.integers(0, HOUR_US, 8)
    unbounded_attempts = rng.integers(UNBOUNDED_ATTEMPTS[0], UNBOUNDED_ATTEMPTS[1] + 1, 8)

    busiest = np.argsort([-m.share for m in MODELS], kind="stable")[:3]
    peaks = []
    for i in range(days):
        shard_hour = int(rng.choice([12, 15]))
        minute = shard_hour * 60 + int(rng.integers(30, 180 - 30 - PEAK_MINUTES + 1))
        multiplier = round(float(rng.uniform(*PEAK_MULTIPLIER)), 2)
        peaks.append(Peak(int(rng.choice(busiest)), day_start[i] + minute * MINUTE_US, multiplier))
    return RunPlan(fleet, drift, token_jump, non_retryable, unbounded, unbounded_at, unbounded_attempts, tuple(peaks))
