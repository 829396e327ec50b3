"""Feedback events: thumbs from end users, flags (some false), and delayed reviews.

Reviews are the ground-truth label: every abusive user active in a shard of hours gets
one of their requests reviewed ``abusive``, 1–3 days later; about half of the flags on
normal users' requests are reviewed ``ok`` (false flags).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthetic_workload.catalog import MODELS
from synthetic_workload.requests import DayRequests

KINDS: tuple[str, ...] = ("thumb", "review", "flag")
VALUES: tuple[str, ...] = ("up", "down", "abusive", "ok", "spam", "abuse", "jailbreak", "pii", "other")
SOURCES: tuple[str, ...] = ("app", "trust_safety", "moderation", "user_report")
THUMB, REVIEW, FLAG = range(3)
_V = {v: i for i, v in enumerate(VALUES)}
_S = {s: i for i, s in enumerate(SOURCES)}
DAY_US = 86_400_000_000
_INTERACTIVE = np.array([m.operation in ("chat", "completion") for m in MODELS])


@dataclass
class FeedbackEvents:
    """Feedback events as parallel arrays (codes index KINDS / VALUES / SOURCES)."""

    rid: np.ndarray  # uint64 request id
    ts_us: np.ndarray
    kind: np.ndarray
    value: np.ndarray
    source: np.ndarray

    def __len__(self) -> int:
        return len(self.rid)

    @staticmethod
    def concat(parts: list[FeedbackEvents]) -> FeedbackEvents:
        if not parts:
            e = np.zeros(0, dtype=np.int64)
            return FeedbackEvents(e.astype(np.uint64), e, e.astype(np.int8), e.astype(np.int8), e.astype(np.int8))
        return FeedbackEvents(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("rid", "ts_us", "kind", "value", "source"))
        )

    def take(self, idx: np.ndarray) -> FeedbackEvents:
        return FeedbackEvents(self.rid[idx], self.ts_us[idx], self.kind[idx], self.value[idx], self.source[idx])


def feedback_for_shard(d: DayRequests, *, seed: int, day_index: int, shard: int) -> FeedbackEvents:
    """The feedback events about the requests of one shard (arrival times may be days later)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 4, day_index, shard]))
    n = len(d)
    failed = d.status >= 400
    parts: list[tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]] = []

    # thumbs on interactive requests, mostly within minutes; errors and truncations get "down"
    t_rows = np.flatnonzero(_INTERACTIVE[d.model] & (rng.random(n) < np.where(failed, 0.06, 0.03)))
    p_down = 0.12 + 0.68 * failed[t_rows] + 0.2 * (d.finish[t_rows] == 1)
    t_val = np.where(rng.random(t_rows.size) < p_down, _V["down"], _V["up"])
    t_delay = np.minimum(rng.lognormal(np.log(120e6), 1.2, t_rows.size), 1.5 * DAY_US)
    parts.append((t_rows, t_delay, THUMB, t_val, np.full(t_rows.size, _S["app"])))

    # flags: moderation catches abusers often; normal users get the occasional false flag
    f_rows = np.flatnonzero(rng.random(n) < np.where(d.abusive, 0.08, 0.001))
    ab = d.abusive[f_rows]
    f_val = np.where(
        ab,
        rng.choice([_V["spam"], _V["abuse"], _V["jailbreak"]], f_rows.size),
        rng.choice([_V["pii"], _V["spam"], _V["other"]], f_rows.size),
    )
    f_src = np.where(rng.random(f_rows.size) < np.where(ab, 0.7, 0.4), _S["moderation"], _S["user_report"])
    f_delay = np.minimum(rng.lognormal(np.log(600e6), 1.0, f_rows.size), 0.5 * DAY_US)
    parts.append((f_rows, f_delay, FLAG, f_val, f_src))

    # reviews, 1–3 days later: one request of every abusive user active here, half the false flags
    ab_rows = np.flatnonzero(d.abusive)
    if ab_rows.size:
        order = ab_rows[rng.permutation(ab_rows.size)]
        _, first = np.unique(d.user[order], return_index=True)
        r_ab = np.sort(order[first])
    else:
        r_ab = ab_rows
    r_ok = f_rows[~ab & (rng.random(f_rows.size) < 0.5)]
    r_rows = np.concatenate([r_ab, r_ok])
    r_val = np.concatenate([np.full(r_ab.size, _V["abusive"]), np.full(r_ok.size, _V["ok"])])
    r_delay = rng.uniform(DAY_US + 1000, 3 * DAY_US - 1000, r_rows.size)  # still 1–3 days once cut to ms
    parts.append((r_rows, r_delay, REVIEW, r_val, np.full(r_rows.size, _S["trust_safety"])))

    rows = np.concatenate([p[0] for p in parts])
    return FeedbackEvents(
        rid=d.rid[rows],
        # at least 1 ms later, so the millisecond timestamp written is never before the request
        ts_us=d.ts_us[rows] + np.maximum(np.concatenate([p[1] for p in parts]), 1000).astype(np.int64),
        kind=np.concatenate([np.full(p[0].size, p[2], dtype=np.int8) for p in parts]),
        value=np.concatenate([p[3] for p in parts]).astype(np.int8),
        source=np.concatenate([p[4] for p in parts]).astype(np.int8),
    )
