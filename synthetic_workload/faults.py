"""Malformed lines: which faults a day gets, and how a valid line is broken into each kind.

A fault line is derived from a valid line of the same day (its *template*) with a fresh
request id that no valid request uses, then broken in one of :data:`FAULT_KINDS` ways.
Fault lines are few (``fault_rate`` × requests per day), so breaking them is plain
Python on each line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from synthetic_workload import ids

FAULT_KINDS: tuple[str, ...] = (
    "truncated_json",
    "wrong_type",
    "missing_required",
    "negative_duration",
    "far_future_ts",
    "invalid_utf8",
    "oversized_line",
)
KIND_INDEX = {k: i for i, k in enumerate(FAULT_KINDS)}
#: Oversized lines are > 1 MiB each; more than a few per day would dominate the data volume.
OVERSIZED_MAX_PER_DAY = 3
MAX_FAULT_RATE = 0.5

_WRONG_TYPE = (
    (re.compile(r'"input_tokens":\d+'), '"input_tokens":"many"'),
    (re.compile(r'"duration_ms":[0-9.eE+-]+'), '"duration_ms":"slow"'),
    (re.compile(r'"status_code":\d+'), '"status_code":"OK"'),
)
_MISSING = (
    ("ts", re.compile(r',"ts":("[^"]*"|\d+)')),
    ("tenant_id", re.compile(r',"tenant_id":"[^"]*"')),
    ("model", re.compile(r',"model":"[^"]*"')),
    ("request_id", re.compile(r'"request_id":"[^"]*",')),
)
_DURATION = re.compile(r'"duration_ms":([0-9.eE+-]+)')
_TS = re.compile(r'"ts":(?:"(\d{4})([^"]*)"|(\d+))')
_BAD_UTF8 = (b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80")  # invalid byte, broken 2-byte seq, surrogate
_FILLER = "Please summarise the attached document and list every obligation it contains. "
_OVERSIZED_CHARS = (1 << 20) + 64 * 1024


@dataclass(frozen=True)
class FaultPlan:
    """The fault lines of one day: template row (day-level row number), kind, variant, id."""

    template: np.ndarray
    kind: np.ndarray
    variant: np.ndarray
    rid: np.ndarray  # uint64 request ids (fault namespace: never a valid request's id)


def round_half_up(x: float) -> int:
    """``x`` rounded to the nearest integer, halves up (0.5 → 1; Python's round gives 0)."""
    return math.floor(x + 0.5 + 1e-9)


def kind_counts(count: int) -> list[int]:
    """How many fault lines of each kind a day with ``count`` fault lines gets.

    Kinds take turns, so every kind appears once ``count`` ≥ the number of kinds;
    oversized lines are capped at :data:`OVERSIZED_MAX_PER_DAY` and the excess goes to
    the other kinds in turn.
    """
    k = len(FAULT_KINDS)
    counts = [count // k + (1 if i < count % k else 0) for i in range(k)]
    over = KIND_INDEX["oversized_line"]
    excess = max(0, counts[over] - OVERSIZED_MAX_PER_DAY)
    counts[over] -= excess
    others = [i for i in range(k) if i != over]
    for j in range(excess):
        counts[others[j % len(others)]] += 1
    return counts


def plan_faults(seed: int, day_index: int, requests: int, fault_rate: float) -> FaultPlan:
    """Draw the day's ``round_half_up(fault_rate × requests)`` fault lines."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3, day_index]))
    count = round_half_up(fault_rate * requests)
    kind = np.repeat(np.arange(len(FAULT_KINDS)), kind_counts(count))
    rng.shuffle(kind)
    return FaultPlan(
        template=np.sort(rng.integers(0, max(requests, 1), count)),
        kind=kind.astype(np.int8),
        variant=rng.integers(0, 1 << 30, count),
        rid=ids.structured_ids(seed, ids.NS_FAULT, day_index, np.arange(count)),
    )


def _far_future(match: re.Match[str], variant: int) -> str:
    years = 20 + 4 * (variant % 10)  # multiple of 4: Feb 29 stays valid (before 2100)
    if match.group(3) is not None:
        return f'"ts":{int(match.group(3)) + round(years * 365.25 * 86_400_000)}'
    year, rest = int(match.group(1)) + years, match.group(2)
    if rest.startswith("-02-29") and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        rest = "-02-28" + rest[6:]
    return f'"ts":"{year:04d}{rest}"'


def corrupt(kind: int, line: str, variant: int) -> tuple[bytes, bool]:
    """Break valid ``line`` (ending in ``\\n``) into fault ``kind``.

    Returns the fault line (ending in ``\\n``) and whether it still carries its request id.
    """
    body = line.rstrip("\n")
    name = FAULT_KINDS[kind]
    has_id = True
    if name == "truncated_json":
        # cut after the request id (first 36 chars) but before the closing brace
        cut = 40 + variant % max(1, len(body) - 41)
        out = body[:cut]
    elif name == "wrong_type":
        pattern, text = _WRONG_TYPE[variant % len(_WRONG_TYPE)]
        out = pattern.sub(text, body, count=1)
    elif name == "missing_required":
        field, pattern = _MISSING[variant % len(_MISSING)]
        out = pattern.sub("", body, count=1)
        has_id = field != "request_id"
    elif name == "negative_duration":
        out = _DURATION.sub(lambda mt: f'"duration_ms":-{float(mt.group(1)) or 1.0!r}', body, count=1)
    elif name == "far_future_ts":
        out = _TS.sub(lambda mt: _far_future(mt, variant), body, count=1)
    elif name == "invalid_utf8":
        bad = _BAD_UTF8[variant % len(_BAD_UTF8)]
        return body.encode().replace(b'"client":"', b'"client":"' + bad, 1) + b"\n", True
    elif name == "oversized_line":
        filler = (_FILLER * (_OVERSIZED_CHARS // len(_FILLER) + 1))[:_OVERSIZED_CHARS]
        out = body.replace(",", f',"prompt":"{filler}",', 1)
    else:  # pragma: no cover - FAULT_KINDS is closed
        raise ValueError(f"unknown fault kind {kind}")
    return (out + "\n").encode(), has_id
