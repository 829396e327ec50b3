"""The manifest: exact ground truth about what was written, for the tests of later layers.

Per day it counts distinct valid requests, duplicates, retries and fault lines (with
their request ids), and per model the requests, tokens, errors and version split.
Sums exclude duplicates and fault lines; ``errors`` means ``status_code >= 400``. A day's workflow
calls (:mod:`synthetic_workload.workflows`) count as its requests (by model where they name one), and
its workflow span lines as its ``lines`` and ``trace_only_lines``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from synthetic_workload import ids
from synthetic_workload.assemble import ShardLines
from synthetic_workload.catalog import ERR_INVALID, ERROR_TYPES, MODELS, SERVERS, VERSION_OFFSET, VERSIONS
from synthetic_workload.faults import FAULT_KINDS
from synthetic_workload.population import Population
from synthetic_workload.requests import DayPlan, DayRequests, epoch_us
from synthetic_workload.traffic import (
    HOUR_US,
    INSTANCE_KINDS,
    KIND_INITIAL,
    MAX_ATTEMPTS,
    MINUTE_US,
    PEAK_MINUTES,
    PEAK_SURROUNDING_MINUTES,
    TOKEN_JUMP_FACTOR,
    WARMUP_REQUESTS,
)
from synthetic_workload.workflows import DayWorkflows

#: Changes whenever the same arguments would write different files (1.1: ISA-L deflate;
#: 1.2: quotas.csv; 1.3: multi-step workflows; 1.4: server instances and the planted operator patterns;
#: 1.5: a slow retrieve planted in a majority of RAG traces on slow-retrieval days only).
GENERATOR_VERSION = "1.5.0"
_NM, _NE, _NV = len(MODELS), len(ERROR_TYPES) + 1, len(VERSIONS)


@dataclass
class DayStats:
    """Running totals of one day, summed shard by shard."""

    n_tenants: int
    n_users: int
    lines: int = 0
    requests: int = 0
    duplicates: int = 0
    retries: int = 0
    abusive_requests: int = 0
    cache_hits: int = 0
    trace_only_lines: int = 0
    hours: np.ndarray = field(default_factory=lambda: np.zeros(24, dtype=np.int64))
    status: dict[int, int] = field(default_factory=dict)
    model_requests: np.ndarray = field(default_factory=lambda: np.zeros(_NM, dtype=np.int64))
    model_duplicates: np.ndarray = field(default_factory=lambda: np.zeros(_NM, dtype=np.int64))
    model_tokens: np.ndarray = field(default_factory=lambda: np.zeros((_NM, 3), dtype=np.int64))
    model_errors: np.ndarray = field(default_factory=lambda: np.zeros((_NM, _NE), dtype=np.int64))
    model_cache_hits: np.ndarray = field(default_factory=lambda: np.zeros(_NM, dtype=np.int64))
    versions: np.ndarray = field(default_factory=lambda: np.zeros(_NV, dtype=np.int64))
    fault_counts: np.ndarray = field(default_factory=lambda: np.zeros(len(FAULT_KINDS), dtype=np.int64))
    fault_ids: list[list[str]] = field(default_factory=lambda: [[] for _ in FAULT_KINDS])
    tenants_seen: np.ndarray = field(init=False)
    users_seen: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.tenants_seen = np.zeros(self.n_tenants, dtype=bool)
        self.users_seen = np.zeros(self.n_users, dtype=bool)

    def add_shard(self, d: DayRequests, lines: ShardLines) -> None:
        """Add one shard's valid requests, duplicates and fault lines."""
        n_lines = int(lines.hour_bounds[-1] - lines.hour_bounds[0])
        self.lines += n_lines
        self.requests += len(d)
        self.duplicates += len(lines.dup_rows)
        self.retries += int((d.attempt > 1).sum())
        self.abusive_requests += int(d.abusive.sum())
        self.cache_hits += int(d.cache_hit.sum())
        self.hours += np.bincount(d.hour, minlength=24)
        codes, counts = np.unique(d.status, return_counts=True)
        for c, k in zip(codes.tolist(), counts.tolist()):
            self.status[c] = self.status.get(c, 0) + k
        model = d.model.astype(np.int64)
        self.model_requests += np.bincount(model, minlength=_NM)
        self.model_duplicates += np.bincount(model[lines.dup_rows], minlength=_NM)
        for j, col in enumerate((d.in_tok, d.out_tok, d.cached_tok)):
            self.model_tokens[:, j] += _int_bincount(model, col, _NM)
        self.model_errors += np.bincount(model * _NE + d.err, minlength=_NM * _NE).reshape(_NM, _NE)
        self.model_cache_hits += np.bincount(model[d.cache_hit], minlength=_NM)
        self.versions += np.bincount(d.version, minlength=_NV)
        self.fault_counts += np.bincount(lines.fault_kind, minlength=len(FAULT_KINDS))
        with_id = lines.fault_has_id
        for kind, rid in zip(lines.fault_kind[with_id].tolist(), ids.hex_strings("req_", lines.fault_rid[with_id])):
            self.fault_ids[kind].append(rid)
        self.tenants_seen[d.tenant] = True
        self.users_seen[d.user[d.user >= 0]] = True

    def add_workflows(self, w: DayWorkflows) -> None:
        """Count the day's workflow calls (a line each) and its lines of spans only (a line a trace that has them)."""
        at = w.calls
        n, span_lines = at.size, w.span_traces.size
        self.lines += n + span_lines
        self.trace_only_lines += span_lines
        self.requests += n
        self.status[200] = self.status.get(200, 0) + n
        self.hours += np.bincount((w.start_us[at] - epoch_us(w.date)) // HOUR_US, minlength=24)
        at = at[w.model[at] >= 0]
        model = w.model[at].astype(np.int64)
        self.model_requests += np.bincount(model, minlength=_NM)
        for j, col in enumerate((w.in_tok[at], w.out_tok[at], np.zeros(at.size))):
            self.model_tokens[:, j] += _int_bincount(model, col, _NM)
        self.versions += np.bincount(VERSION_OFFSET[model], minlength=_NV)
        self.tenants_seen[w.tenant] = True
        self.users_seen[w.user] = True

    def to_json(self) -> dict:
        """The day's manifest entry."""
        models = {}
        for i, m in enumerate(MODELS):
            errors = self.model_errors[i]
            models[m.name] = {
                "requests": int(self.model_requests[i]),
                "duplicates": int(self.model_duplicates[i]),
                "input_tokens": int(self.model_tokens[i, 0]),
                "output_tokens": int(self.model_tokens[i, 1]),
                "cached_input_tokens": int(self.model_tokens[i, 2]),
                "cache_hits": int(self.model_cache_hits[i]),
                "errors": int(errors[1:].sum()),
                "errors_by_type": {e: int(errors[j + 1]) for j, e in enumerate(ERROR_TYPES)},
                "versions": {
                    v: int(self.versions[k]) for k, (mi, v) in enumerate(VERSIONS) if mi == i and self.versions[k] > 0
                },
            }
        return {
            "lines": self.lines,
            "requests": self.requests,
            "duplicates": self.duplicates,
            "retries": self.retries,
            "faults": {k: int(self.fault_counts[i]) for i, k in enumerate(FAULT_KINDS)},
            "fault_request_ids": {k: sorted(self.fault_ids[i]) for i, k in enumerate(FAULT_KINDS)},
            "models": models,
            "tenants": int(self.tenants_seen.sum()),
            "users": int(self.users_seen.sum()),
            "abusive_requests": self.abusive_requests,
            "cache_hits": self.cache_hits,
            "trace_only_lines": self.trace_only_lines,
            "status_codes": {str(c): self.status[c] for c in sorted(self.status)},
            "hours": self.hours.tolist(),
        }


class PlantedStats:
    """The planted operator patterns as written (the manifest's ``planted``), counted from each
    shard's valid requests: duplicates and fault lines excluded, whole-chain trimming included."""

    def __init__(self, pop: Population, plans: list[DayPlan]) -> None:
        self.pop, self.plans, self.run = pop, plans, plans[0].run
        n = len(self.run.fleet.names)
        self.first_us = np.full(n, np.iinfo(np.int64).max)
        self.warm = np.zeros(n, dtype=np.int64)
        self.non_retryable = 0
        self.chains = 0
        self.longest = 0
        self.peaks = np.zeros((len(plans), 2), dtype=np.int64)  # first attempts inside, around

    def add_shard(self, plan: DayPlan, d: DayRequests) -> None:
        """Count one shard's share of each pattern."""
        fleet = self.run.fleet
        seen, at = np.unique(d.instance, return_index=True)  # rows are in time order
        self.first_us[seen] = np.minimum(self.first_us[seen], d.ts_us[at])
        lo, hi = (plan.day_start_us + h * HOUR_US for h in d.hours)
        for i in np.flatnonzero((fleet.start_us >= lo) & (fleet.start_us < hi) & (fleet.kind != KIND_INITIAL)):
            self.warm[i] = min(WARMUP_REQUESTS, int((d.instance == i).sum()))
        bad = plan.planted(self.run.non_retryable)
        if bad is not None:
            of = (d.tenant == bad.tenant) & (d.model == bad.model)
            self.non_retryable += int((of & (d.attempt > 1) & (d.err == ERR_INVALID)).sum())
        loop = plan.planted(self.run.unbounded)
        if loop is not None:
            attempts = d.attempt[(d.tenant == loop.tenant) & (d.model == loop.model)]
            self.chains += int((attempts == MAX_ATTEMPTS + 1).sum())
            self.longest = max(self.longest, int(attempts.max(initial=0)))
        peak = self.run.peaks[plan.day_index]
        if lo <= peak.start_us < hi:
            t = d.ts_us[(d.model == peak.model) & (d.attempt == 1)]
            end, around = peak.start_us + PEAK_MINUTES * MINUTE_US, PEAK_SURROUNDING_MINUTES * MINUTE_US
            inside = int(((t >= peak.start_us) & (t < end)).sum())
            self.peaks[plan.day_index] += [inside, int(((t >= peak.start_us - around) & (t < end + around)).sum())]
            self.peaks[plan.day_index, 1] -= inside

    def to_json(self) -> dict:
        """The manifest's ``planted`` entry."""
        run, fleet, days = self.run, self.run.fleet, [p.date.isoformat() for p in self.plans]
        tenant_ids, day0 = self.pop.tenant_ids, self.plans[0].day_start_us

        def date(ts_us: int) -> str:
            return days[(ts_us - day0) // (24 * HOUR_US)]

        started = sorted(np.flatnonzero(fleet.kind != KIND_INITIAL).tolist(), key=lambda i: int(fleet.start_us[i]))
        planted: dict[str, list[dict]] = {
            "instance_starts": [
                {
                    "server": SERVERS[fleet.server[i]][1],
                    "server_instance": fleet.names[i],
                    "event_date": date(int(fleet.start_us[i])),
                    "started_at": iso_us(int(fleet.start_us[i])),
                    "first_request_at": iso_us(int(self.first_us[i])) if self.warm[i] else None,
                    "warmup_factor": float(fleet.warmup[i]),
                    "warmup_requests": int(self.warm[i]),
                    "kind": INSTANCE_KINDS[fleet.kind[i]],
                }
                for i in started
            ],
            "drifting_instances": [],
            "token_jumps": [],
            "non_retryable_retries": [],
            "unbounded_chains": [],
            "peaks": [],
        }
        if (drift := run.drift) is not None:
            planted["drifting_instances"].append(
                {
                    "server": SERVERS[fleet.server[drift.instance]][1],
                    "server_instance": fleet.names[drift.instance],
                    "event_date": days[drift.day],
                    "restarted_at": iso_us(drift.restart_us),
                    "next_instance": fleet.names[drift.instance + 1],
                    "slowdown_before_restart": drift.slowdown,
                }
            )
        if (jump := run.token_jump) is not None:
            planted["token_jumps"].append(
                {"tenant_id": tenant_ids[jump.tenant], "event_date": days[jump.day], "factor": TOKEN_JUMP_FACTOR}
            )
        if (bad := run.non_retryable) is not None and self.non_retryable:
            planted["non_retryable_retries"].append(
                {
                    "tenant_id": tenant_ids[bad.tenant],
                    "event_date": days[bad.day],
                    "model": MODELS[bad.model].name,
                    "retries": self.non_retryable,
                }
            )
        if (loop := run.unbounded) is not None and self.chains:
            planted["unbounded_chains"].append(
                {
                    "tenant_id": tenant_ids[loop.tenant],
                    "event_date": days[loop.day],
                    "model": MODELS[loop.model].name,
                    "chains": self.chains,
                    "longest": self.longest,
                }
            )
        for i, peak in enumerate(run.peaks):
            inside, around = self.peaks[i].tolist()
            rate_around = around / (2 * PEAK_SURROUNDING_MINUTES)
            planted["peaks"].append(
                {
                    "event_date": days[i],
                    "model": MODELS[peak.model].name,
                    "start": iso_us(peak.start_us),
                    "end": iso_us(peak.start_us + PEAK_MINUTES * MINUTE_US),
                    "factor": round(inside / PEAK_MINUTES / rate_around, 3) if around else None,
                }
            )
        return planted


def iso_us(ts_us: int) -> str:
    """A UTC instant as ISO 8601 with microseconds and ``Z``."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=ts_us)
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _int_bincount(codes: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per-code integer sums (float64 bincount is exact: the sums stay far below 2**53)."""
    return np.rint(np.bincount(codes, weights=values, minlength=size)).astype(np.int64)


def abusive_user_ids(pop: Population) -> list[str]:
    return sorted(pop.user_ids[i] for i in pop.abusers.tolist())


def write_manifest(out: Path, manifest: dict) -> None:
    """Write ``out/manifest.json`` (indented, keys in insertion order) atomically."""
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(out / "manifest.json")
