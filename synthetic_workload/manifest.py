"""The manifest: exact ground truth about what was written, for the tests of later layers.

Per day it counts distinct valid requests, duplicates, retries and fault lines (with
their request ids), and per model the requests, tokens, errors and version split.
Sums exclude duplicates and fault lines; ``errors`` means ``status_code >= 400``. A day's workflow
calls (:mod:`synthetic_workload.workflows`) count as its requests (by model where they name one), and
its workflow span lines as its ``lines`` and ``trace_only_lines``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from synthetic_workload import ids
from synthetic_workload.assemble import ShardLines
from synthetic_workload.catalog import ERROR_TYPES, MODELS, VERSION_OFFSET, VERSIONS
from synthetic_workload.faults import FAULT_KINDS
from synthetic_workload.population import Population
from synthetic_workload.requests import DayRequests, epoch_us
from synthetic_workload.traffic import HOUR_US
from synthetic_workload.workflows import DayWorkflows

#: Changes whenever the same arguments would write different files (1.1: ISA-L deflate;
#: 1.2: quotas.csv; 1.3: multi-step workflows).
GENERATOR_VERSION = "1.3.0"
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
