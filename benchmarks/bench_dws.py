"""DWS build on a 1,000,000-request day (and the 8 days before it, at the same rate, for its
7-day windows), against one hand-written DuckDB window query producing the same rows.

Ours: ``strata build dws`` for the day — the three tables (user, tenant, model version),
read from the Delta lake, computed, checked, audited and committed — in a child process,
whose peak RSS (VmHWM, plus the GX audit worker's) is reported.

Baseline (named, same run, same Delta files): DuckDB computing the user table's rows with
window functions — every row to write is a probe among the user's requests, each feature an
aggregate over a RANGE frame (exact ``quantile_cont`` included) — writing nothing. It runs
under a time cap (``STRATA_BENCH_DWS_CAP_S``, default 600 s); when it does not finish, the
cap is its time (so the ratio is a lower bound). Target: ours (three tables, published) at
least 0.5× its speed on the user table alone. A sample of its rows is compared with ours. Peak
RSS (VmHWM) of both processes is reported; DuckDB runs with its default memory limit.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import Measurement, scaled

DAY = dt.date(2026, 3, 10)
PER_DAY = int(os.environ.get("STRATA_BENCH_DWS_REQUESTS", scaled(1_000_000, 2_000)))
CAP_S = float(os.environ.get("STRATA_BENCH_DWS_CAP_S", "600"))

_OURS = """
import datetime as dt, json, sys, time
from warehouse.settings import load_settings
from warehouse.dws.build import build
from warehouse.storage.lake import Lake
settings = load_settings()
from contracts import audit_worker
worker = audit_worker.pid()  # the shared GX worker runs already, as for every command but the first of a while
t0 = time.perf_counter()
runs = build(Lake(settings), dt.date.fromisoformat(sys.argv[1]))
seconds = time.perf_counter() - t0
def high_water_kb(pid="self"):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_kb": high_water_kb(), "worker_kb": high_water_kb(worker) if worker else 0,
                  "rows": {n: r.published for n, r in runs.items()},
                  "requests": runs["dws.user_features"].counts.records}))
"""

_BASELINE = """
import datetime as dt, json, sys, time
import pyarrow.parquet as pq
from benchmarks.bench_dws import baseline_sql
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.duck import connect
from warehouse.tables import DWD_REQUEST
settings = load_settings()
day = dt.date.fromisoformat(sys.argv[1])
files = Lake(settings).open_table(DWD_REQUEST).file_uris()
con = connect()
con.execute(f"SET temp_directory = '{sys.argv[2]}'")
con.execute(f"CREATE VIEW requests AS SELECT * FROM read_parquet({files!r}, hive_partitioning = true)")
t0 = time.perf_counter()
rows = con.execute(baseline_sql(day)).to_arrow_table()
seconds = time.perf_counter() - t0
pq.write_table(rows, sys.argv[3])
with open("/proc/self/status") as status:
    peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "rows": rows.num_rows, "peak_kb": peak_kb}))
"""


def baseline_sql(day: dt.date) -> str:
    """The user table's rows of ``day`` as one DuckDB query: probes among requests, RANGE-framed windows."""
    from warehouse.dws.transform import HOUR_US, WINDOWS, day_bounds

    lo, hi = day_bounds(day)
    start = int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()) * 1_000_000
    offsets = ", ".join(f"({HOUR_US * (1 + w)})" for w in (0, *WINDOWS.values()))
    aggs = {
        "request_count": "count(one)",
        "error_rate": "avg(err)",
        "retry_rate": "avg(rty)",
        "timeout_share": "avg(tmo)",
        "rate_limited_share": "avg(rl)",
        "latency_p50_ms": "quantile_cont(dur, 0.5)",
        "latency_p95_ms": "quantile_cont(dur, 0.95)",
        "ttft_p95_ms": "quantile_cont(ttft, 0.95)",
        "input_tokens_mean": "avg(itok)",
        "output_tokens_mean": "avg(otok)",
        "input_tokens_sum": "coalesce(sum(itok), 0)",
        "output_tokens_sum": "coalesce(sum(otok), 0)",
        "cost_usd_sum": "coalesce(sum(cost), 0)",
        "cache_hit_rate": "avg(hit)",
        "night_share": "avg(night)",
        "distinct_models": "count(DISTINCT model)",
    }
    selects = []
    for name, hours in WINDOWS.items():
        frame = f"(PARTITION BY k ORDER BY t RANGE BETWEEN {hours * HOUR_US - 1} PRECEDING AND CURRENT ROW)"
        for feature, agg in aggs.items():
            if agg.startswith("coalesce("):
                selects.append(f"coalesce({agg[9:-4]} OVER {frame}, 0) AS {feature}_{name}")
            else:
                selects.append(f"{agg} OVER {frame} AS {feature}_{name}")
    return f"""
WITH req AS (
    SELECT user_pseudonym AS k, epoch_us(ts) AS t, 1 AS one, is_error::TINYINT AS err, is_retry::TINYINT AS rty,
           coalesce(error_type = 'timeout' OR status_code IN (408, 504), false)::TINYINT AS tmo,
           coalesce(error_type = 'rate_limited' OR status_code = 429, false)::TINYINT AS rl,
           duration_ms AS dur, CASE WHEN operation = 'chat' THEN ttft_ms END AS ttft,
           input_tokens AS itok, output_tokens AS otok, cost_usd AS cost, cache_hit::TINYINT AS hit,
           (hour(ts) >= 22 OR hour(ts) < 6)::TINYINT AS night, model
    FROM requests
    WHERE event_date BETWEEN '{lo.date()}' AND '{hi.date()}'
      AND ts >= '{lo.isoformat()}'::TIMESTAMPTZ AND ts < '{hi.isoformat()}'::TIMESTAMPTZ
      AND user_pseudonym IS NOT NULL
),
probes AS (
    SELECT DISTINCT k, t // {HOUR_US} * {HOUR_US} + d AS feature_us FROM req, (VALUES {offsets}) AS o(d)
    WHERE t // {HOUR_US} * {HOUR_US} + d >= {start} AND t // {HOUR_US} * {HOUR_US} + d < {start + 24 * HOUR_US}
),
rows AS (
    SELECT k, t, one, err, rty, tmo, rl, dur, ttft, itok, otok, cost, hit, night, model, NULL::BIGINT AS probe
    FROM req
    UNION ALL
    SELECT k, feature_us - 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, feature_us
    FROM probes
)
SELECT k AS user_pseudonym, make_timestamp(probe) AS feature_ts, {", ".join(selects)}
FROM rows
QUALIFY probe IS NOT NULL
"""


def _child(code: str, args: list[str], timeout: float | None = None) -> dict | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout,
            env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"benchmark child failed:\n{e.stderr[-3000:]}") from None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compare(settings, baseline_path: Path, sample: int = 500) -> int:
    """Rows of the baseline equal to ours, on a sample (floats within 1e-9 relative); returns the rows compared."""
    import math

    import polars as pl

    from warehouse.tables import table

    theirs = pl.read_parquet(baseline_path).with_columns(pl.col("feature_ts").dt.replace_time_zone("UTC"))
    ours = pl.read_delta(table("dws.user_features").uri(settings)).filter(pl.col("event_date") == DAY)
    if theirs.height != ours.height:
        raise AssertionError(f"DuckDB wrote {theirs.height} user rows, ours {ours.height}")
    picked = theirs.sample(min(sample, theirs.height), seed=1)
    joined = picked.join(ours, on=["user_pseudonym", "feature_ts"], how="left", suffix="_ours")
    for column in picked.columns[2:]:
        for a, b in zip(joined[column].to_list(), joined[f"{column}_ours"].to_list()):
            same = (a is None and b is None) or (
                a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
            )
            if not same:
                raise AssertionError(f"{column}: DuckDB {a} ≠ ours {b}")
    return picked.height


def run(workdir: Path) -> list[Measurement]:
    from deltalake import write_deltalake

    from benchmarks.synthetic import dwd_requests
    from warehouse.settings import load_settings
    from warehouse.tables import DWD_REQUEST

    home = workdir / "home"
    os.environ.update({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": "bench-key-0123456789abcdef"})
    os.environ.pop("STRATA_LAKE_URI", None)
    settings = load_settings()
    first = DAY - dt.timedelta(days=8)
    for i in range(9):  # one day at a time: the generator's memory stays that of one day
        rows = dwd_requests(first + dt.timedelta(days=i), 1, PER_DAY, seed=i)
        write_deltalake(DWD_REQUEST.uri(settings), rows, partition_by=["event_date"], mode="append")
        del rows
    ours = _child(_OURS, [DAY.isoformat()])
    assert ours is not None
    spill = home / "tmp" / "duckdb"
    spill.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    theirs = _child(_BASELINE, [DAY.isoformat(), str(spill), str(workdir / "baseline.parquet")], timeout=CAP_S)
    baseline_s = theirs["seconds"] if theirs else time.perf_counter() - started
    compared = _compare(settings, workdir / "baseline.parquet") if theirs else 0
    requests = ours["requests"]
    peak_mb = (ours["peak_kb"] + ours["worker_kb"]) / 1024
    print(
        f"  peak RSS: build process {ours['peak_kb'] / 1024:,.0f} MB, "
        f"GX audit worker {ours['worker_kb'] / 1024:,.0f} MB"
    )
    note = "" if theirs else f" (did not finish in {CAP_S:.0f}s: lower bound)"
    print(
        f"  ours: {ours['seconds']:.1f}s for {requests:,} requests read, rows {ours['rows']}, "
        f"peak RSS {peak_mb:,.0f} MB (process + audit worker); DuckDB user table: {baseline_s:.1f}s{note}; "
        f"{compared} sampled rows equal"
    )
    return [
        Measurement(
            "DWS build, 1M-request day (3 tables, published)",
            requests / ours["seconds"],
            "requests/s",
            "DuckDB window query, user table only" + note,
            requests / baseline_s,
            target_ratio=0.5,
        ),
        Measurement(
            "DWS build peak RSS (process + audit worker)",
            peak_mb,
            "MB",
            "DuckDB window query's process, user table only" + note,
            theirs["peak_kb"] / 1024 if theirs else float("nan"),
            higher_is_better=False,
        ),
    ]
