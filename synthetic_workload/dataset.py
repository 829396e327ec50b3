"""``generate()``: write a realistic request-log dataset and its ground-truth manifest.

The work is a pipeline over shards (a few hours of one day): while the main thread
encodes shard *k* (polars, all cores), a worker draws shard *k + 1* (numpy) and others
gzip and write the hourly files of shard *k − 1* (zlib releases the GIL). Every random
draw comes from a generator seeded by ``(seed, purpose, day, shard)``, so the bytes
written do not depend on timing or thread count.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contracts.errors import InputError
from synthetic_workload.assemble import assemble_shard, duplicate_count, plan_duplicates
from synthetic_workload.catalog import pipeline_upgrade_at, price_rows, prices_csv
from synthetic_workload.encode import encode_feedback
from synthetic_workload.faults import FAULT_KINDS, MAX_FAULT_RATE, plan_faults, round_half_up
from synthetic_workload.feedback import DAY_US, KINDS, REVIEW, SOURCES, VALUES, FeedbackEvents, feedback_for_shard
from synthetic_workload.manifest import GENERATOR_VERSION, DayStats, PlantedStats, abusive_user_ids, write_manifest
from synthetic_workload.population import Population, build_population
from synthetic_workload.quotas import quota_rows, quotas_csv
from synthetic_workload.requests import DayPlan, epoch_us, generate_shard, plan_day
from synthetic_workload.traffic import plan_run
from synthetic_workload.workflows import DayWorkflows, day_files, generate_workflows
from synthetic_workload.writer import LineBuffer, WrittenFile, gzip_bytes, write_file
from warehouse.progress import Progress

_MAX_REQUESTS_PER_DAY = 1 << 31
_MAX_DAYS = 100_000


def _validate(out: Path, days: int, requests_per_day: int, seed: int, start: dt.date, fault_rate: float) -> None:
    def is_int(x: object) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

    if not isinstance(out, (str, os.PathLike)):
        raise InputError(f"out must be a path, got {out!r}")
    if not is_int(days) or not 1 <= days <= _MAX_DAYS:
        raise InputError(f"days must be an integer from 1 to {_MAX_DAYS}, got {days!r}")
    if not is_int(requests_per_day) or not 1 <= requests_per_day < _MAX_REQUESTS_PER_DAY:
        raise InputError(
            f"requests_per_day must be an integer from 1 to {_MAX_REQUESTS_PER_DAY - 1}, got {requests_per_day!r}"
        )
    if not is_int(seed) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(start, dt.date) or isinstance(start, dt.datetime):
        raise InputError(f"start must be a datetime.date, got {start!r}")
    if (
        isinstance(fault_rate, bool)
        or not isinstance(fault_rate, (int, float, np.floating))
        or not 0.0 <= float(fault_rate) <= MAX_FAULT_RATE
    ):
        raise InputError(f"fault_rate must be a number in [0, {MAX_FAULT_RATE}], got {fault_rate!r}")


def _prepare_out(out: Path) -> None:
    """Create ``out``; replace a previous generator output there, refuse foreign data."""
    out.mkdir(parents=True, exist_ok=True)
    owned = [out / "requests", out / "feedback"]
    manifest = out / "manifest.json"
    previous = False
    if manifest.is_file():
        try:
            previous = "generator_version" in json.loads(manifest.read_text())
        except (ValueError, UnicodeDecodeError):
            previous = False
    if previous:
        for p in owned:
            shutil.rmtree(p, ignore_errors=True)
        manifest.unlink()
    elif any(p.exists() and any(p.iterdir()) for p in owned):
        raise InputError(
            f"{out} already holds requests/ or feedback/ files that no generator manifest.json "
            "describes; choose an empty folder"
        )


def _compress_write(out: Path, rel: str, buffer: LineBuffer, start: int, end: int) -> WrittenFile:
    return write_file(out, rel, gzip_bytes(buffer.pieces(start, end)), end - start)


def _write_feedback(out: Path, start: dt.date, days: int, events: FeedbackEvents) -> tuple[list[WrittenFile], dict]:
    """Write feedback files by arrival day and summarize them.

    One file per day from ``start`` to the later of the last generated day and the last
    arrival (reviews arrive up to 3 days after the run), empty days included.
    """
    ts = events.ts_us - events.ts_us % 1000  # written with millisecond precision
    order = np.lexsort((events.kind, events.rid, ts))
    ev = events.take(order)
    ts = ts[order]
    day = (ts - epoch_us(start)) // DAY_US
    n_days = max(days, int(day.max()) + 1 if len(ev) else 0)
    bounds = np.searchsorted(day, np.arange(n_days + 1))
    kinds, values, sources = pl.Series(KINDS), pl.Series(VALUES), pl.Series(SOURCES)
    files, per_day = [], {}
    for i in range(n_days):
        a, b = int(bounds[i]), int(bounds[i + 1])
        date = start + dt.timedelta(days=i)
        lines = encode_feedback(
            ev.rid[a:b],
            ts[a:b],
            kinds.gather(ev.kind[a:b]),
            values.gather(ev.value[a:b]),
            sources.gather(ev.source[a:b]),
        )
        buf = LineBuffer(lines)
        rel = f"feedback/date={date.isoformat()}/feedback-{date:%Y%m%d}.jsonl.gz"
        files.append(write_file(out, rel, gzip_bytes(buf.pieces(0, b - a)), b - a))
        per_day[date.isoformat()] = b - a
    review = ev.kind == REVIEW
    summary = {
        "lines": len(ev),
        "by_kind": {k: int((ev.kind == j).sum()) for j, k in enumerate(KINDS)},
        "reviews_abusive": int((review & (ev.value == VALUES.index("abusive"))).sum()),
        "reviews_ok": int((review & (ev.value == VALUES.index("ok"))).sum()),
        "days": per_day,
    }
    return files, summary


def generate(
    out: Path,
    *,
    days: int,
    requests_per_day: int,
    seed: int,
    start: dt.date,
    fault_rate: float = 0.0,
    progress: Progress | None = None,
) -> dict:
    """Writes the dataset under `out` and returns the manifest (also written to out/manifest.json).

    ``progress("generate", done_lines, total_lines)`` is called after each hourly file.

    Layout: ``requests/date=D/hour=HH/requests-YYYYMMDDTHH.jsonl.gz`` (one file per hour),
    ``requests/date=D/workflows-YYYYMMDD.jsonl.gz`` and ``….otlp.json.gz`` (the day's multi-step
    workflows: their calls, and their spans that are no call as OTLP/JSON; see
    :mod:`synthetic_workload.workflows`), ``feedback/date=D/feedback-YYYYMMDD.jsonl.gz`` (by arrival
    day), ``prices.csv``, ``quotas.csv`` (tenant quotas) and ``manifest.json``. Same arguments →
    byte-identical files.

    A day holds ``requests_per_day`` distinct valid requests of independent traffic (retries
    included) and, on top of them, the calls of its workflow traces (1 % of ``requests_per_day``
    traces, 3–5 calls each); the manifest's per-day ``requests`` counts both.
    A previous generator output in ``out`` is replaced. Raises ValueError on bad arguments.
    """
    _validate(out, days, requests_per_day, seed, start, fault_rate)
    out = Path(out)
    days, requests_per_day, seed, fault_rate = int(days), int(requests_per_day), int(seed), float(fault_rate)
    _prepare_out(out)
    pop = build_population(seed, requests_per_day)
    plans = _plan_days(pop, seed=seed, start=start, days=days, requests_per_day=requests_per_day)
    workflows = [generate_workflows(pop, p) for p in plans]
    requests = _write_requests(out, pop, plans, workflows, fault_rate, progress)
    fb_files, fb_summary = _write_feedback(out, start, days, FeedbackEvents.concat(requests.feedback))
    prices = prices_csv(start, days)
    prices_file = write_file(out, "prices.csv", prices, len(price_rows(start, days)))
    quotas = quota_rows(pop, seed=seed, requests_per_day=requests_per_day, start=start, days=days)
    quotas_file = write_file(out, "quotas.csv", quotas_csv(quotas), len(quotas))
    manifest: dict[str, Any] = {
        "seed": seed,
        "start": start.isoformat(),
        "day_count": days,
        "requests_per_day": requests_per_day,
        "fault_rate": fault_rate,
        "generator_version": GENERATOR_VERSION,
        "fault_kinds": list(FAULT_KINDS),
        "files": [
            {"path": f.path, "lines": f.lines, "sha256": f.sha256}
            for f in sorted(requests.files + fb_files, key=lambda f: f.path)
        ],
        "prices": {"path": prices_file.path, "rows": prices_file.lines, "sha256": prices_file.sha256},
        "quotas": {"path": quotas_file.path, "rows": quotas_file.lines, "sha256": quotas_file.sha256},
        "population": {"tenants": pop.n_tenants, "users": len(pop.user_ids), "abusive_users": len(pop.abusers)},
        "abusive_user_ids": abusive_user_ids(pop),
        "retry_storms": _storms(pop, plans),
        "days": {p.date.isoformat(): s.to_json() for p, s in zip(plans, requests.stats)},
        "feedback": fb_summary,
        "planted": requests.planted.to_json(),
    }
    manifest.setdefault("planted", {})["workflows"] = [entry for w in workflows for entry in w.planted()]
    write_manifest(out, manifest)
    return manifest


def _plan_days(pop: Population, *, seed: int, start: dt.date, days: int, requests_per_day: int) -> list[DayPlan]:
    """Each day's plan; the serving pipeline's upgrade falls at one hour of the run."""
    upgrade = pipeline_upgrade_at(start, days)
    upgrade_us = epoch_us(upgrade.date()) + upgrade.hour * 3_600_000_000
    run = plan_run(pop, seed=seed, start=start, days=days)
    return [
        plan_day(
            pop,
            seed=seed,
            day_index=i,
            days=days,
            date=start + dt.timedelta(days=i),
            requests=requests_per_day,
            pipeline_upgrade_us=upgrade_us,
            run=run,
        )
        for i in range(days)
    ]


@dataclass(frozen=True)
class _RequestFiles:
    """What writing the request files leaves: the files, each day's stats, each shard's feedback events,
    the planted patterns as written."""

    files: list[WrittenFile]
    stats: list[DayStats]
    feedback: list[FeedbackEvents]
    planted: PlantedStats


def _write_requests(
    out: Path,
    pop: Population,
    plans: list[DayPlan],
    workflows: list[DayWorkflows],
    fault_rate: float,
    progress: Progress | None,
) -> _RequestFiles:
    """Write the hourly request files, shard by shard, drawing the next shard and gzipping the last meanwhile;
    and each day's workflow files with its first shard."""
    seed, requests_per_day, days = plans[0].seed, plans[0].requests, len(plans)
    lines_per_day = requests_per_day + duplicate_count(requests_per_day) + round_half_up(fault_rate * requests_per_day)
    workflow_files = [day_files(pop, w) for w in workflows]
    total = days * lines_per_day + sum(len(lines) for files in workflow_files for _, lines in files)
    stats = [DayStats(pop.n_tenants, len(pop.user_ids)) for _ in range(days)]
    planted = PlantedStats(pop, plans)
    tasks = [(i, s) for i in range(days) for s in range(len(plans[i].shard_hours))]
    files: list[WrittenFile] = []
    feedback: list[FeedbackEvents] = []
    done = 0

    def finish(fut: Future[WrittenFile]) -> None:
        nonlocal done
        f = fut.result()
        files.append(f)
        done += f.lines
        if progress is not None:
            progress("generate", done, total)

    with (
        ThreadPoolExecutor(1, thread_name_prefix="strata-gen") as gen_pool,
        ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="strata-gzip") as zip_pool,
    ):
        next_shard = gen_pool.submit(generate_shard, pop, plans[0], 0)
        pending: deque[Future[WrittenFile]] = deque()
        for k, (i, s) in enumerate(tasks):
            d = next_shard.result()
            if k + 1 < len(tasks):
                ni, ns = tasks[k + 1]
                next_shard = gen_pool.submit(generate_shard, pop, plans[ni], ns)
            if s == 0:  # the day's duplicates and fault lines (plans are small; one day at a time)
                dup_plan = plan_duplicates(seed, i, requests_per_day)
                fault_plan = plan_faults(seed, i, requests_per_day, fault_rate)
                for rel, lines in workflow_files[i]:
                    pending.append(zip_pool.submit(_compress_write, out, rel, LineBuffer(lines), 0, len(lines)))
                stats[i].add_workflows(workflows[i])
            shard_lines = assemble_shard(pop, plans[i], d, dup_plan, fault_plan)
            stats[i].add_shard(d, shard_lines)
            planted.add_shard(plans[i], d)
            feedback.append(feedback_for_shard(d, seed=seed, day_index=i, shard=s))
            date = plans[i].date
            h0, h1 = d.hours
            for j, h in enumerate(range(h0, h1)):
                rel = f"requests/date={date.isoformat()}/hour={h:02d}/requests-{date:%Y%m%d}T{h:02d}.jsonl.gz"
                a, b = int(shard_lines.hour_bounds[j]), int(shard_lines.hour_bounds[j + 1])
                pending.append(zip_pool.submit(_compress_write, out, rel, shard_lines.buffer, a, b))
            while len(pending) > h1 - h0:  # finish the previous shard's files, in order
                finish(pending.popleft())
        while pending:
            finish(pending.popleft())
    return _RequestFiles(files, stats, feedback, planted)


def _storms(pop: Population, plans: list[DayPlan]) -> list[dict]:
    """The retry storms of the run, for the manifest."""
    return [
        {
            "date": p.date.isoformat(),
            "tenant_id": pop.tenant_ids[p.storm.tenant],
            "start": _iso_us(p.storm.start_us),
            "end": _iso_us(p.storm.end_us),
        }
        for p in plans
        if p.storm is not None
    ]


def _iso_us(ts_us: int) -> str:
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(ts_us))
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
