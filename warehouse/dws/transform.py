"""The DWS transform: ``dwd.request`` rows → hourly rolling-window features per entity.

Pure: it reads no table, so hand-written frames test it whole. The build hands it the
requests of a few entities at a time (all of each entity's requests in the days it needs).

Windows. A request at ``ts`` belongs to the hour ``[h, h+1h)``; the row of an entity
stamped ``feature_ts`` (an hour boundary) holds, for w in 1h, 24h, 7d, the requests with
``ts`` in ``[feature_ts - w, feature_ts)``: half-open like the hour, so a request enters
every window at the end of its hour, and a window never looks at or past its feature_ts.

Exactness. The windows of an entity change only at the end of an hour in which one of its
requests entered (hour + 1h) or left a window (hour + 1h + w). A row is written for each
of those instants (and no other), the one where every window became empty included, so
the latest row at or before an instant t holds exactly the windows that end at the last
hour boundary at or before t.

How. Counts, sums, rates and means come from hourly sums per entity and their running
totals (a window is the difference of two totals of its entity). Distinct models come from the last hour
each (entity, model) was seen before ``feature_ts``. Percentiles are exact, from the raw
values of each window: linear interpolation between the closest ranks (numpy's default
``linear`` method, DuckDB's ``quantile_cont``): position ``q·(n-1)`` in the sorted values.
Small windows are sorted all at once (one sort of every window's values, keyed by window,
then by the value's rank); a large one is the entity's previous window, still sorted, less the
values that left and plus those that entered.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import polars as pl

from warehouse.tables import DWS_MODEL_FEATURES, DWS_TENANT_FEATURES, DWS_USER_FEATURES, Table

HOUR_US = 3_600_000_000
#: Window name → length in hours.
WINDOWS: dict[str, int] = {"1h": 1, "24h": 24, "7d": 7 * 24}
#: Night: 22:00 (inclusive) to 06:00 (exclusive) UTC, by the request's ts.
NIGHT_HOURS = (22, 6)
#: The dwd.request columns the features read.
SOURCE_COLUMNS = [
    "ts",
    "user_pseudonym",
    "tenant_id",
    "model",
    "model_version",
    "operation",
    "duration_ms",
    "ttft_ms",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cache_hit",
    "status_code",
    "error_type",
    "is_error",
    "is_retry",
]
#: Windows with more values than this are slid hour by hour; smaller ones are sorted together.
LARGE_WINDOW = 512
#: Hours from the first hour a build reads (D-8 23:00) to D 00:00.
_FIRST_HOUR = 7 * 24 + 1
_SUMS = ("n", "err", "rty", "tmo", "rl", "night", "itok_n", "itok", "otok_n", "otok", "cost", "hit_n", "hit")


@dataclass(frozen=True)
class Entity:
    """One DWS table: its target, its key column and how a request row gives the key."""

    target: Table
    key: str
    #: The key of a dwd.request row (rows where it is null are left out).
    expression: Callable[[], pl.Expr]
    #: Plain columns written beside the key, each a function of the key's requests.
    extra: tuple[tuple[str, Callable[[], pl.Expr]], ...] = ()

    @property
    def distinct_models(self) -> bool:
        return "distinct_models_1h" in self.target.contract


def _model_version() -> pl.Expr:
    return pl.col("model_version").fill_null("unknown")


USER = Entity(DWS_USER_FEATURES, "user_pseudonym", lambda: pl.col("user_pseudonym"))
TENANT = Entity(DWS_TENANT_FEATURES, "tenant_id", lambda: pl.col("tenant_id"))
#: model_key is 'model@version', the version 'unknown' when the request carried none.
MODEL = Entity(
    DWS_MODEL_FEATURES,
    "model_key",
    lambda: pl.concat_str(pl.col("model"), pl.lit("@"), _model_version()),
    (("model", lambda: pl.col("model")), ("model_version", _model_version)),
)
ENTITIES: tuple[Entity, ...] = (USER, TENANT, MODEL)


def day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The ``ts`` range of the requests a build of ``day`` reads: ``[D-8 23:00, D 23:00)``.

    The windows of D's rows reach back to D-7 00:00, and a request in D-8's last hour
    leaves the 7-day window at D 00:00, which makes a row of D. A request from D 23:00 on
    counts from D+1 00:00.
    """
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    return start - dt.timedelta(days=7, hours=1), start + dt.timedelta(hours=23)


def prepare(requests: pl.DataFrame | pl.LazyFrame, entity: Entity, day: dt.date) -> pl.DataFrame:
    """The requests ``entity``'s rows of ``day`` need, :func:`reduce` d and sorted by key and time."""
    return reduce(requests, entity, day).sort("k", "t").collect()


def reduce(requests: pl.DataFrame | pl.LazyFrame, entity: Entity, day: dt.date) -> pl.LazyFrame:
    """The requests ``entity``'s rows of ``day`` need, reduced to what the features read
    (``k``, ``t`` in µs, the key's plain columns, the values), in any order."""
    lo, hi = day_bounds(day)
    ts = pl.col("ts")
    return (
        requests.lazy()
        # features describe model calls: a tool's or an agent's step (no model) is none
        .filter((ts >= lo) & (ts < hi) & pl.col("model").is_not_null())
        .select(
            entity.expression().alias("k"),
            *[e().alias(name) for name, e in entity.extra],
            ts.dt.epoch("us").alias("t"),
            pl.col("is_error").cast(pl.Int8).alias("err"),
            pl.col("is_retry").cast(pl.Int8).alias("rty"),
            ((pl.col("error_type") == "timeout").fill_null(False) | pl.col("status_code").is_in([408, 504]))
            .cast(pl.Int8)
            .alias("tmo"),
            ((pl.col("error_type") == "rate_limited").fill_null(False) | (pl.col("status_code") == 429))
            .cast(pl.Int8)
            .alias("rl"),
            ((ts.dt.hour() >= NIGHT_HOURS[0]) | (ts.dt.hour() < NIGHT_HOURS[1])).cast(pl.Int8).alias("night"),
            pl.col("duration_ms").alias("dur"),
            pl.when(pl.col("operation") == "chat").then(pl.col("ttft_ms")).alias("ttft"),
            pl.col("input_tokens").alias("itok"),
            pl.col("output_tokens").alias("otok"),
            pl.col("cost_usd").alias("cost"),
            pl.col("cache_hit").cast(pl.Int8).alias("hit"),
            pl.col("model").alias("_model"),
        )
        .filter(pl.col("k").is_not_null())
    )


def features(requests: pl.DataFrame, entity: Entity, day: dt.date) -> pl.DataFrame:
    """``entity``'s feature rows stamped within ``day``, from its requests as :func:`prepare`
    makes them (every request of each entity present in the frame)."""
    if requests.is_empty():
        from contracts import arrow_schema

        return pl.from_arrow(arrow_schema(entity.target.contract).empty_table())  # type: ignore[return-value]
    start_h = int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()) // 3600
    r = requests.with_columns(
        kid=(pl.col("k") != pl.col("k").shift()).fill_null(True).cum_sum().cast(pl.Int64) - 1,
        hr=pl.col("t") // HOUR_US - (start_h - _FIRST_HOUR),
    )  # hours since D-8 23:00: 0 … 191
    hours = _hourly(r)
    probes = _probes(hours, day_h=_FIRST_HOUR)
    pkid, pfh = probes["kid"].to_numpy(), probes["fh"].to_numpy()
    out: dict[str, Any] = {}
    hour_key = _key(hours["kid"].to_numpy(), hours["hr"].to_numpy())
    # running totals per entity (not across entities: a float total then depends on the entity alone)
    running = hours.select(pl.col(c).cum_sum().over("kid") for c in _SUMS)
    totals = {c: running[c].to_numpy() for c in _SUMS}
    first = np.searchsorted(hour_key, _key(pkid, np.zeros_like(pfh)))  # the entity's first hour row
    known = {c: _Values(r.select("kid", "hr", c).filter(pl.col(c).is_not_null())) for c in ("dur", "ttft")}
    seen = _model_hours(r) if entity.distinct_models else None
    for name, wh in WINDOWS.items():
        a = np.searchsorted(hour_key, _key(pkid, pfh - wh))
        b = np.searchsorted(hour_key, _key(pkid, pfh))
        s = {c: _before(totals[c], b, first) - _before(totals[c], a, first) for c in _SUMS}
        out |= _window_columns(name, s)
        out |= _percentiles(known, name, pkid, pfh, wh)
        if seen is not None:
            out[f"distinct_models_{name}"] = _distinct_models(seen, pkid, pfh, wh)
    keys = r.group_by("kid", maintain_order=True).first().select("kid", "k", *[n for n, _ in entity.extra])
    feature_ts = pl.Series((pfh + start_h - _FIRST_HOUR) * HOUR_US).cast(pl.Datetime("us", "UTC"))
    rows = pl.DataFrame({"kid": pkid}).join(keys, on="kid", how="left", maintain_order="left")
    rows = rows.select(pl.col("k").alias(entity.key), *[n for n, _ in entity.extra]).with_columns(
        feature_ts=feature_ts, event_date=feature_ts.dt.date(), **{k: pl.Series(k, v) for k, v in out.items()}
    )
    names = entity.target.contract.column_names
    return rows.select(names)


def _before(running: np.ndarray, index: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The entity's total over its hour rows before ``index`` (0 when none)."""
    return np.where(index > first, running[np.maximum(index - 1, 0)], 0)


def _key(kid: np.ndarray, hour: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, kid.astype(np.int64) * 4096 + hour)


def _hourly(r: pl.DataFrame) -> pl.DataFrame:
    return r.group_by("kid", "hr", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("n"),
        *[pl.col(c).cast(pl.Int64).sum() for c in ("err", "rty", "tmo", "rl", "night")],
        pl.col("itok").count().cast(pl.Int64).alias("itok_n"),
        pl.col("itok").sum(),
        pl.col("otok").count().cast(pl.Int64).alias("otok_n"),
        pl.col("otok").sum(),
        pl.col("cost").sum(),
        pl.col("hit").count().cast(pl.Int64).alias("hit_n"),
        pl.col("hit").cast(pl.Int64).sum(),
    )


def _probes(hours: pl.DataFrame, day_h: int) -> pl.DataFrame:
    """(kid, fh): the hours (as ends, in hours since D-8 23:00) at which a window changed, within the day."""
    offsets = pl.DataFrame({"d": [1] + [1 + w for w in WINDOWS.values()]})
    return (
        hours.select("kid", "hr")
        .join(offsets, how="cross")
        .select("kid", fh=pl.col("hr") + pl.col("d"))
        .filter((pl.col("fh") >= day_h) & (pl.col("fh") < day_h + 24))
        .unique()
        .sort("kid", "fh")
    )


def _window_columns(name: str, s: dict[str, np.ndarray]) -> dict[str, Any]:
    n = s["n"]

    def share(num: np.ndarray, den: np.ndarray) -> pl.Series:
        with np.errstate(divide="ignore", invalid="ignore"):
            return pl.Series(np.where(den > 0, num / np.maximum(den, 1), np.nan)).fill_nan(None)

    return {
        f"request_count_{name}": n,
        f"error_rate_{name}": share(s["err"], n),
        f"retry_rate_{name}": share(s["rty"], n),
        f"timeout_share_{name}": share(s["tmo"], n),
        f"rate_limited_share_{name}": share(s["rl"], n),
        f"input_tokens_mean_{name}": share(s["itok"], s["itok_n"]),
        f"output_tokens_mean_{name}": share(s["otok"], s["otok_n"]),
        f"input_tokens_sum_{name}": s["itok"],
        f"output_tokens_sum_{name}": s["otok"],
        # running totals of floats: a difference may come out a rounding error below 0
        f"cost_usd_sum_{name}": np.where(n > 0, np.maximum(s["cost"], 0.0), 0.0),
        f"cache_hit_rate_{name}": share(s["hit"], s["hit_n"]),
        f"night_share_{name}": share(s["night"], n),
    }


class _Values:
    """The known values of one column, in (entity, time) order, with their rank among all of them."""

    def __init__(self, rows: pl.DataFrame) -> None:
        self.key = _key(rows["kid"].to_numpy(), rows["hr"].to_numpy())
        self.values = rows[rows.columns[-1]].to_numpy()
        self.order = np.argsort(self.values, kind="stable")
        self.rank = np.empty(len(self.values), dtype=np.int64)
        self.rank[self.order] = np.arange(len(self.values))


def _percentiles(
    known: dict[str, _Values], name: str, pkid: np.ndarray, pfh: np.ndarray, wh: int
) -> dict[str, pl.Series]:
    out = {}
    for column, label, qs in (("dur", "latency", (0.5, 0.95)), ("ttft", "ttft", (0.95,))):
        col = known[column]
        a = np.searchsorted(col.key, _key(pkid, pfh - wh))
        b = np.searchsorted(col.key, _key(pkid, pfh))
        found = window_quantiles(col.values, a, b, qs, col.order, col.rank)
        for q, values in zip(qs, found):
            out[f"{label}_p{round(q * 100)}_ms_{name}"] = pl.Series(values).fill_nan(None)
    return out


def window_quantiles(
    values: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    qs: tuple[float, ...],
    order: np.ndarray | None = None,
    rank: np.ndarray | None = None,
) -> list[np.ndarray]:
    """For each window ``values[a[i]:b[i]]``, its ``qs`` quantiles (linear interpolation; NaN when empty).

    ``order`` (argsort of ``values``) and ``rank`` (its inverse) may be passed in when known.
    """
    n = b - a
    result = [np.full(len(a), np.nan) for _ in qs]
    small = np.flatnonzero((n > 0) & (n <= LARGE_WINDOW))
    if len(small):
        lengths = n[small]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        seg = np.repeat(np.arange(len(small)), lengths)
        pos = a[small][seg] + np.arange(len(seg)) - starts[seg]
        # one sort of every small window's values: keyed by window, then by the value's rank
        if order is None or rank is None:
            order = np.argsort(values, kind="stable")
            rank = np.empty(len(values), dtype=np.int64)
            rank[order] = np.arange(len(values))
        keys = np.sort(seg.astype(np.int64) * len(values) + rank[pos])
        ordered = values[order[keys % len(values)]]
        for qi, q in enumerate(qs):
            result[qi][small] = _interpolate(ordered, starts, lengths, q)
    _sliding(values, a, b, np.flatnonzero(n > LARGE_WINDOW), qs, result)
    return result


def _sliding(
    values: np.ndarray, a: np.ndarray, b: np.ndarray, large: np.ndarray, qs: tuple[float, ...], result: list[np.ndarray]
) -> None:
    """Quantiles of the large windows, in order: each one's sorted values are the previous
    window's, less the values that left and plus those that entered (O(window) per step)."""
    window = np.empty(0)
    last_a = last_b = -1
    for i in large:
        lo, hi = int(a[i]), int(b[i])
        if lo < last_a or lo >= last_b or (lo - last_a) + (hi - last_b) > hi - lo:
            window = np.sort(values[lo:hi])  # another entity, or a jump: start afresh
        else:
            leave = np.sort(values[last_a:lo])
            if len(leave):
                # the k-th of equal values leaving sits k places after the first of them
                window = np.delete(
                    window, np.searchsorted(window, leave) + np.arange(len(leave)) - np.searchsorted(leave, leave)
                )
            enter = np.sort(values[last_b:hi])
            if len(enter):
                window = np.insert(window, np.searchsorted(window, enter), enter)
        last_a, last_b = lo, hi
        count = hi - lo
        for qi, q in enumerate(qs):
            low, high, frac = _position(q, count)
            result[qi][i] = window[low] + (window[high] - window[low]) * frac


def _position(q: float, n: int) -> tuple[int, int, float]:
    pos = q * (n - 1)
    lo = int(np.floor(pos))
    return lo, min(lo + 1, n - 1), pos - lo


def _interpolate(ordered: np.ndarray, starts: np.ndarray, lengths: np.ndarray, q: float) -> np.ndarray:
    pos = q * (lengths - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, lengths - 1)
    frac = pos - lo
    low, high = ordered[starts + lo], ordered[starts + hi]
    return cast(np.ndarray, low + (high - low) * frac)


def _model_hours(r: pl.DataFrame) -> pl.DataFrame:
    """(pair, hr): the hours in which each (entity, model) pair has requests, sorted; ``kid`` beside."""
    seen = r.select("kid", "_model", "hr").unique().sort("kid", "_model", "hr")
    return seen.with_columns(pair=pl.struct("kid", "_model").rle_id().cast(pl.Int64)).select("kid", "pair", "hr")


def _distinct_models(seen: pl.DataFrame, pkid: np.ndarray, pfh: np.ndarray, wh: int) -> np.ndarray:
    """Per probe, the number of models the entity used in the hours [fh - wh, fh)."""
    pairs = seen.select("kid", "pair").unique(subset="pair", keep="first", maintain_order=True)
    probes = pl.DataFrame({"probe": np.arange(len(pkid)), "kid": pkid, "fh": pfh}).join(
        pairs, on="kid", maintain_order="left"
    )
    pair, fh = probes["pair"].to_numpy(), probes["fh"].to_numpy()
    pairs_of, hours = seen["pair"].to_numpy(), seen["hr"].to_numpy()
    last = np.searchsorted(_key(pairs_of, hours), _key(pair, fh)) - 1  # the pair's last hour before fh
    ok = last >= 0
    ok[ok] &= pairs_of[last[ok]] == pair[ok]
    ok[ok] &= hours[last[ok]] >= fh[ok] - wh
    return np.bincount(probes["probe"].to_numpy()[ok], minlength=len(pkid)).astype(np.int64)
