"""A shard's file lines in order: valid requests, at-least-once duplicates, fault lines.

Valid lines are in time order. A duplicate is an exact copy of an earlier valid line of
the same day, written later in the same hour's file or in a later hour's file (of the
same shard). A fault line sits just after its template's time. Each hour of the shard
is a contiguous run of lines, written to that hour's file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthetic_workload.encode import encode_requests
from synthetic_workload.faults import FaultPlan, corrupt, round_half_up
from synthetic_workload.population import Population
from synthetic_workload.requests import DayPlan, DayRequests
from synthetic_workload.traffic import HOUR_US
from synthetic_workload.writer import LineBuffer

#: Share of a day's valid requests delivered twice.
DUPLICATE_RATE = 0.005
#: Share of duplicates that land in a later hour's file rather than later in the same file.
LATE_DUPLICATE_SHARE = 0.35


@dataclass(frozen=True)
class DuplicatePlan:
    """The day's duplicates: source row (day-level), whether it lands in a later hour, draws."""

    src: np.ndarray
    later: np.ndarray
    u: np.ndarray  # (n, 2) uniforms placing each copy


def duplicate_count(requests: int) -> int:
    return round_half_up(DUPLICATE_RATE * requests)


def plan_duplicates(seed: int, day_index: int, requests: int) -> DuplicatePlan:
    """Draw the day's ``round_half_up(0.5% × requests)`` duplicates."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 5, day_index]))
    count = duplicate_count(requests)
    return DuplicatePlan(
        src=np.sort(rng.integers(0, max(requests, 1), count)),
        later=rng.random(count) < LATE_DUPLICATE_SHARE,
        u=rng.random((count, 2)),
    )


@dataclass
class ShardLines:
    """The encoded lines of one shard plus what the manifest needs to know about them."""

    buffer: LineBuffer
    hour_bounds: np.ndarray  # hour ``hours[0] + i`` is lines [bounds[i], bounds[i + 1])
    dup_rows: np.ndarray  # shard rows that were duplicated (one entry per copy)
    fault_kind: np.ndarray
    fault_rid: np.ndarray
    fault_has_id: np.ndarray


def assemble_shard(
    pop: Population, plan: DayPlan, d: DayRequests, dups: DuplicatePlan, faults: FaultPlan
) -> ShardLines:
    """Order, encode and break the shard's lines; see the module docstring."""
    n = len(d)
    lo, hi = d.row_offset, d.row_offset + n
    h0, h1 = d.hours
    day_start = plan.day_start_us

    sel = (dups.src >= lo) & (dups.src < hi)
    dsrc = dups.src[sel] - lo
    u = dups.u[sel]
    src_hour = d.hour[dsrc].astype(np.int64)
    later = dups.later[sel] & (src_hour < h1 - 1)
    tgt_hour = np.where(later, src_hour + 1 + np.floor(u[:, 0] * (h1 - 1 - src_hour)).astype(np.int64), src_hour)
    tgt_start = day_start + tgt_hour * HOUR_US
    ts = d.ts_us[dsrc]
    same_key = np.minimum(
        ts + 1 + np.floor(u[:, 1] * (tgt_start + HOUR_US - 1 - ts)).astype(np.int64), tgt_start + HOUR_US - 1
    )
    dkey = np.where(later, tgt_start + np.floor(u[:, 1] * HOUR_US).astype(np.int64), same_key)

    fsel = (faults.template >= lo) & (faults.template < hi)
    ftmpl = faults.template[fsel] - lo
    fts = d.ts_us[ftmpl]
    fhour_end = day_start + (d.hour[ftmpl].astype(np.int64) + 1) * HOUR_US
    fkey = np.minimum(fts + 1 + faults.variant[fsel] % 997, fhour_end - 1)

    # merge the few extra lines into the time-ordered valid lines
    keys = np.concatenate([dkey, fkey])
    ex_order = np.lexsort((np.arange(keys.size), keys))
    pos = np.searchsorted(d.ts_us, keys[ex_order], side="right")
    order = np.insert(np.arange(n), pos, n + ex_order)
    all_src = np.concatenate([np.arange(n), dsrc, ftmpl])[order]
    all_rid = np.concatenate([d.rid, d.rid[dsrc], faults.rid[fsel]])[order]
    plain = np.concatenate([np.ones(n + dsrc.size, dtype=bool), np.zeros(ftmpl.size, dtype=bool)])[order]
    all_key = np.concatenate([d.ts_us, keys])[order]
    bounds = np.searchsorted(all_key, day_start + np.arange(h0, h1 + 1) * HOUR_US, side="left")

    lines = encode_requests(pop, d, all_src, all_rid, plain)

    # break the fault lines (positions in file order → index in the fault plan subset)
    fault_pos = np.flatnonzero(~plain)
    fault_idx = order[fault_pos] - n - dsrc.size
    kinds = faults.kind[fsel][fault_idx]
    variants = faults.variant[fsel][fault_idx]
    patches: dict[int, bytes] = {}
    has_id = np.ones(fault_pos.size, dtype=bool)
    texts = lines.gather(fault_pos).to_list() if fault_pos.size else []
    for i, (p, text) in enumerate(zip(fault_pos.tolist(), texts)):
        patches[p], has_id[i] = corrupt(int(kinds[i]), text, int(variants[i]))
    return ShardLines(
        buffer=LineBuffer(lines, patches),
        hour_bounds=bounds,
        dup_rows=dsrc,
        fault_kind=kinds,
        fault_rid=faults.rid[fsel][fault_idx],
        fault_has_id=has_id,
    )
