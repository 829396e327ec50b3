"""ADS for a week of 1,000,000-request days: dbt's models plus publishing, against hand-written DuckDB.

Ours: ``strata build ads`` for each of the 7 days in turn (one process, as a backfill runs),
measured as dbt's own per-model execution times (run_results) plus the publishing of the
marts (streamed out of DuckDB into publish: row checks, the GX audit, the Delta commit).
dbt's fixed start-up — importing dbt, parsing the project, connecting — and its data and unit
tests are reported on their own lines.

Baseline (named, same run, same Delta tables): hand-written DuckDB queries computing the
same tables for each day straight from the lake (``delta_scan``), each fetched to Arrow —
no dbt, no contract, no tests, no Delta write. It runs before and after ours and counts as
the mean of the two. The bench checks that both compute the same tables (row counts and the
sums of their counts, tokens and cost per day). Target: ours within 2× of the baseline.

The lake — 7 generated days of 1M requests, landed and built to DWD — takes many minutes to
build on two cores, so it is built once and kept in ``$STRATA_BENCH_CACHE`` (default
``.strata/bench-cache``), keyed by the generator version and the DWD contract's version.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.harness import Measurement, scaled
from warehouse.ads.project import PROJECT_DIR

#: The scale; a smaller one (e.g. STRATA_BENCH_ADS_REQUESTS=20000) tries the bench out quickly.
DAYS = int(os.environ.get("STRATA_BENCH_ADS_DAYS", scaled(7, 1)))
REQUESTS_PER_DAY = int(os.environ.get("STRATA_BENCH_ADS_REQUESTS", scaled(1_000_000, 2_000)))
START = dt.date(2026, 3, 2)
SEED = 11
KEY = "bench-only-key-0123456789abcdef"

_BUILD_LAKE = """
import datetime as dt, json, shutil, sys
from pathlib import Path
from strata import pipeline
from warehouse.settings import load_settings
from synthetic_workload import generate
home = Path(sys.argv[1]); days, requests, seed, start = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \\
    dt.date.fromisoformat(sys.argv[5])
settings = load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": sys.argv[6]})
landing = home / "landing"
manifest = generate(landing, days=days, requests_per_day=requests, seed=seed, start=start, fault_rate=0.01)
pipeline.land(settings, [landing / "requests", landing / "feedback"])
pipeline.load_prices(settings, landing / "prices.csv")
pipeline.load_quotas(settings, landing / "quotas.csv")
for day in sorted(set(manifest["feedback"]["days"]) | set(manifest["days"])):
    pipeline.build_dwd(settings, dt.date.fromisoformat(day))
    print("built DWD", day, flush=True)
(home / "manifest.json").write_text(json.dumps(manifest))
shutil.rmtree(landing)
"""

_OURS = """
import datetime as dt, json, sys, time
from warehouse.settings import load_settings
from warehouse.ads.build import build
from warehouse.storage.lake import Lake
settings = load_settings({"STRATA_HOME": sys.argv[1], "STRATA_PSEUDONYM_KEY": sys.argv[2]})
out = []
for day in sys.argv[3:]:
    started = time.perf_counter()
    report = build(Lake(settings), [dt.date.fromisoformat(day)])
    out.append({"day": day, "wall_s": time.perf_counter() - started, "startup_s": report.dbt.startup_s,
                "dbt_s": report.dbt.total_s,
                "models": {n.name: n.seconds for n in report.dbt.nodes if n.resource_type == "model"},
                "tests_s": report.dbt.seconds("test") + report.dbt.seconds("unit_test"),
                "publish": {p.table.name: p.seconds for p in report.published}})
print(json.dumps(out))
"""

#: The dbt project's vars (thresholds, windows): the hand-written queries take the same ones.
VARS: dict[str, object] = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text(encoding="utf-8"))["vars"]

#: The same tables, written by hand for DuckDB over the Delta tables ({lake}, {day}, the thresholds of
#: :data:`VARS`); the marts per model and tenant count model calls only (a tool's or an agent's step names no model).
_QUERIES = {
    "ads.model_daily": """
        select event_date, model, coalesce(model_version, '(none)') as model_version, count(*) as requests,
            count(*) filter (where not is_error) as successes,
            count(*) filter (where not is_error) / count(*) as success_rate,
            count(*) filter (where is_error) as errors,
            count(*) filter (where is_error and error_type = 'invalid_request') as errors_invalid_request,
            count(*) filter (where is_error and error_type = 'rate_limited') as errors_rate_limited,
            count(*) filter (where is_error and error_type = 'oom') as errors_oom,
            count(*) filter (where is_error and error_type = 'timeout') as errors_timeout,
            count(*) filter (where is_error and error_type = 'upstream_error') as errors_upstream_error,
            count(*) filter (where is_error and (error_type is null or error_type not in
                ('invalid_request', 'rate_limited', 'oom', 'timeout', 'upstream_error'))) as errors_other,
            count(*) filter (where is_retry) as retries, count(*) filter (where is_retry) / count(*) as retry_share,
            quantile_cont(duration_ms, [0.5, 0.95, 0.99]) as latency, quantile_cont(ttft_ms, [0.5, 0.95]) as ttft,
            sum(input_tokens)::bigint as input_tokens, sum(output_tokens)::bigint as output_tokens,
            sum(cached_input_tokens)::bigint as cached_input_tokens,
            sum(cost_usd::decimal(18, 9))::decimal(18, 9) as cost_usd,
            count(*) filter (where cost_usd is null) as unpriced_requests,
            count(*) filter (where cache_hit) as cache_hits, count(*) filter (where cache_hit) / count(cache_hit),
            count(feedback_kind) as labelled_requests,
            count(*) filter (where (feedback_kind = 'thumb' and feedback_value = 'up')
                or (feedback_kind = 'review' and feedback_value = 'ok')) / count(feedback_kind)
        from delta_scan('{lake}/dwd/request') where event_date = date '{day}' and model is not null group by all""",
    "ads.tenant_daily": """
        with totals as (
            select event_date, tenant_id, count(*) as requests, sum(input_tokens)::bigint as input_tokens,
                sum(output_tokens)::bigint as output_tokens, sum(cached_input_tokens)::bigint as cached_input_tokens,
                sum(cost_usd::decimal(18, 9))::decimal(18, 9) as cost_usd,
                count(*) filter (where cost_usd is null) as unpriced_requests,
                count(*) filter (where is_error) as errors,
                count(*) filter (where error_type = 'rate_limited' or status_code = 429) as rate_limited,
                count(distinct model) as models_used
            from delta_scan('{lake}/dwd/request') where event_date = date '{day}' and model is not null group by all),
        per_model as (
            select tenant_id, model, sum(cost_usd::decimal(18, 9)) as cost from delta_scan('{lake}/dwd/request')
            where event_date = date '{day}' and cost_usd is not null group by tenant_id, model
            qualify row_number() over (partition by tenant_id order by cost desc, model) = 1)
        select totals.*, input_tokens + output_tokens as total_tokens, per_model.model, per_model.cost,
            q.daily_request_quota, q.daily_token_quota, requests / q.daily_request_quota,
            (input_tokens + output_tokens) / q.daily_token_quota,
            coalesce(requests > q.daily_request_quota, false)
                or coalesce(input_tokens + output_tokens > q.daily_token_quota, false) as is_over_quota
        from totals left join per_model using (tenant_id)
        asof left join delta_scan('{lake}/dwd/tenant_quota') q
            on totals.tenant_id = q.tenant_id and totals.event_date >= q.effective_from""",
    "ads.latency_breakdown": """
        select event_date, model, count(*) as requests,
            count(*) filter (where s) as staged_requests,
            avg(queue_ms) filter (where s), quantile_cont(queue_ms, 0.95) filter (where s),
            avg(preprocess_ms) filter (where s), quantile_cont(preprocess_ms, 0.95) filter (where s),
            avg(inference_ms) filter (where s), quantile_cont(inference_ms, 0.95) filter (where s),
            avg(postprocess_ms) filter (where s), quantile_cont(postprocess_ms, 0.95) filter (where s),
            avg(duration_ms - queue_ms - preprocess_ms - inference_ms - postprocess_ms) filter (where s),
            avg(duration_ms) filter (where s), quantile_cont(duration_ms, 0.95) filter (where s),
            1 - sum(inference_ms) filter (where s) / sum(duration_ms) filter (where s) as share,
            share > 0.2 as is_outside_inference_high
        from (select *, duration_ms is not null and queue_ms is not null and preprocess_ms is not null
                        and inference_ms is not null and postprocess_ms is not null as s
              from delta_scan('{lake}/dwd/request') where event_date = date '{day}' and model is not null)
        group by all""",
    "ads.retry_storms": """
        with minutes as (
            select tenant_id, model, date_trunc('minute', ts) as m,
                count(*) filter (where is_retry) as r, count(*) filter (where not is_retry) as f
            from delta_scan('{lake}/dwd/request') where event_date = date '{day}' group by all),
        stormy as (
            select *, m - lag(m) over (partition by tenant_id, model order by m) > interval 5 minutes
                or lag(m) over (partition by tenant_id, model order by m) is null as starts
            from (select *, sum(r) over w as wr, sum(f) over w as wf from minutes
                  window w as (partition by tenant_id, model order by m
                               range between interval 2 minutes preceding and interval 2 minutes following))
            where r > f and wr >= {storm_min_retries} and wr > wf),
        windows as (
            select tenant_id, model, min(m) as s, max(m) + interval 1 minute as e
            from (select *, sum(starts::int) over (partition by tenant_id, model order by m) as n from stormy)
            group by tenant_id, model, n)
        select windows.tenant_id, windows.model, s, e, sum(r) as retries, sum(f) as first_attempts,
            max(r) as peak_retries_per_minute
        from windows join minutes on windows.tenant_id = minutes.tenant_id and windows.model = minutes.model
            and m >= s and m < e
        group by all having sum(r) >= {storm_min_retries} and sum(r) > sum(f)""",
    "ads.version_mix": """
        select model, sum(n) as requests, count(*) as versions_serving, list(v order by n desc, v) as versions,
            list(n order by n desc, v) as version_requests,
            list(n / total order by n desc, v) as version_shares, arg_max(v, n) as top_version,
            max(n) / any_value(total) as top_version_share, count(*) > 1 as is_mixed,
            coalesce(list(v order by v) filter (where t > 1), []), bool_or(t > 1),
            coalesce(list(v order by v) filter (where p > 1), []), bool_or(p > 1)
        from (select model, coalesce(model_version, '(none)') as v, count(*) as n,
                     count(distinct prompt_template_version) as t, count(distinct pipeline_version) as p,
                     sum(count(*)) over (partition by model) as total
              from delta_scan('{lake}/dwd/request') where event_date = date '{day}' and model is not null
              group by model, v)
        group by model""",
    "ads.capacity": """
        with calls as (select * from delta_scan('{lake}/dwd/request')
                       where event_date = date '{day}' and model is not null),
        minutes as (select model, date_trunc('minute', ts) as m, count(*) as n from calls group by all),
        tens as (select model, m, sum(n) over (partition by model order by m
                                                range between current row and interval 9 minutes following) as n
                 from minutes),
        flight as (select model, t, sum(c) over (partition by model order by t, c rows unbounded preceding) as f
                   from (select model, ts as t, 1 as c from calls where duration_ms is not null
                         union all select model, ts + to_microseconds(round(duration_ms * 1000)::bigint), -1
                         from calls where duration_ms is not null)),
        peaks as (select model, max(f) as c, arg_min(t, (-f, t)) as c_at from flight group by model)
        select model, count(*) as requests, count(*) / 86400, any_value(one.n) / 60, any_value(one.m),
            any_value(ten.n) / 600, any_value(ten.m), coalesce(any_value(peaks.c), 0) as peak_concurrency,
            any_value(peaks.c_at), avg(duration_ms) filter (where status_code < 400) as lat,
            any_value(one.n) / 60 * lat / 1000, count(distinct server_instance) as inst,
            peak_concurrency / nullif(inst, 0),
            ceil(peak_concurrency * (1 + {capacity_headroom}) / {capacity_instance_concurrency})::bigint
                as replicas_needed
        from calls
        join (select * from minutes qualify row_number() over (partition by model order by n desc, m) = 1) one
            using (model)
        join (select * from tens qualify row_number() over (partition by model order by n desc, m) = 1) ten
            using (model)
        left join peaks using (model)
        group by model""",
    "ads.cold_starts": """
        with lives as (
            select server, server_instance, ts, model, request_id,
                case when status_code < 400 and model is not null then duration_ms end as lat,
                row_number() over (partition by server, server_instance order by ts, request_id) as k
            from delta_scan('{lake}/dwd/request') where server is not null and server_instance is not null),
        base as (select model, date_trunc('hour', ts) as h, median(lat) as b from lives
                 where k > {cold_start_requests} and lat is not null group by all),
        inst as (
            select server, server_instance, min(ts) as first_seen_at,
                count(lat / b) filter (where k <= {cold_start_requests}) as warmup,
                median(lat) filter (where k <= {cold_start_requests}),
                median(lat / b) filter (where k <= {cold_start_requests}) as ratio
            from lives left join base on lives.model = base.model and date_trunc('hour', ts) = base.h
            group by all)
        select *, lag(server_instance) over (partition by server order by first_seen_at, server_instance),
            first_seen_at > lake_start + interval {cold_start_lookback_minutes} minutes as is_cold_start,
            coalesce(is_cold_start and ratio > {cold_start_ratio}, false) as is_slow_start
        from inst, (select min(ts) as lake_start from delta_scan('{lake}/dwd/request'))
        qualify first_seen_at::date = date '{day}'""",
    "ads.server_drift": """
        with lives as (
            select server, server_instance, ts, model,
                case when status_code < 400 and model is not null then duration_ms end as lat,
                coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tok,
                row_number() over w as k, (sum(tok) over w - tok) / 1e6 as x
            from delta_scan('{lake}/dwd/request') where server is not null and server_instance is not null
            window w as (partition by server, server_instance order by ts, request_id rows unbounded preceding)),
        base as (select model, date_trunc('hour', ts) as h, median(lat) as b from lives
                 where k > {cold_start_requests} and lat is not null group by all),
        points as (select lives.*, if(lat / b > 0, ln(lat / b), null) as y from lives
                   left join base on lives.model = base.model and date_trunc('hour', ts) = base.h),
        inst as (
            select server, server_instance, min(ts) as first_seen_at, max(ts), count(*), sum(tok) as tokens,
                count(y) filter (where k > {cold_start_requests}) as steady_requests,
                regr_slope(y, x) filter (where k > {cold_start_requests}) as slope,
                exp(regr_intercept(y, x) filter (where k > {cold_start_requests})) as start,
                exp(avg(y) filter (where k > {cold_start_requests})) as mean_y
            from points group by all),
        nexts as (select *, lead(server_instance) over (partition by server order by first_seen_at, server_instance)
                      as next_instance from inst)
        select a.*, exp(a.slope * a.tokens / 1e6) - 1 as increase,
            coalesce(a.steady_requests >= {drift_min_requests} and increase > {drift_threshold}, false) as is_drifting,
            b.mean_y, case when is_drifting and a.next_instance is not null
                then coalesce(b.mean_y <= {drift_recovery_factor} * a.start, false) end
        from nexts a left join inst b on a.server = b.server and a.next_instance = b.server_instance
        where a.first_seen_at::date = date '{day}'""",
    "ads.token_anomalies": """
        with daily as (
            select event_date, tenant_id, count(*) as requests,
                (coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0)) / count(*) as tokens_per_request
            from delta_scan('{lake}/dwd/request')
            where event_date between date '{day}' - 7 and date '{day}' and model is not null group by all),
        baselines as (
            select tenant_id, count(*) as days, median(requests) as r, median(tokens_per_request) as t
            from daily where event_date < date '{day}' group by tenant_id)
        select daily.*, coalesce(days, 0) as baseline_days,
            if(days >= {token_anomaly_min_days}, r, null) as median_requests,
            if(days >= {token_anomaly_min_days}, t, null) as median_tokens_per_request,
            requests / median_requests as request_ratio,
            tokens_per_request / nullif(median_tokens_per_request, 0) as token_ratio,
            coalesce(requests >= {token_anomaly_min_requests} and token_ratio >= {token_anomaly_multiple}
                     and abs(request_ratio - 1) <= {token_anomaly_request_band}, false) as is_flagged
        from daily left join baselines using (tenant_id) where event_date = date '{day}'""",
    "ads.retry_policy": """
        with attempts as (
            select *, row_number() over w as n, lag(status_code) over w as previous
            from delta_scan('{lake}/dwd/request') where event_date between date '{day}' - 1 and date '{day}'
            window w as (partition by coalesce(retry_of, request_id) order by ts, request_id)),
        today as (select * from attempts where event_date = date '{day}' and model is not null),
        chains as (
            select tenant_id, model, count(*) as chains, count(*) filter (where n > {retry_chain_limit}) as long_chains,
                max(n) as longest_chain
            from (select tenant_id, model, max(n) as n from today group by tenant_id, model,
                  coalesce(retry_of, request_id) having bool_or(is_retry))
            group by all),
        retries as (
            select tenant_id, model, count(*) as retries,
                count(*) filter (where previous between 400 and 499 and previous not in (408, 429))
                    as non_retryable_retries,
                (coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0))::bigint as retry_tokens,
                sum(inference_ms) as retry_inference_ms, sum(cost_usd::decimal(18, 9)) as retry_cost_usd
            from today where is_retry group by all)
        select *, non_retryable_retries > 0 or long_chains > 0 as is_flagged
        from retries join chains using (tenant_id, model)""",
    "ads.trace_breakdown": """
        with recursive calls as (
            select trace_id, span_id, parent_span_id, operation as name, ts, duration_ms,
                coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens, cost_usd::decimal(18, 9) as cost
            from delta_scan('{lake}/dwd/request') where event_date = date '{day}' and span_id is not null),
        multi as (select trace_id from calls group by trace_id having count(*) >= 2),
        raw as (
            select * from calls semi join multi using (trace_id)
            union all by name
            select trace_id, span_id, parent_span_id, name, ts, duration_ms, 0 as tokens
            from delta_scan('{lake}/dwd/span') semi join multi using (trace_id) where event_date = date '{day}'),
        steps as (
            select s.*, s.ts + to_microseconds(round(coalesce(s.duration_ms, 0) * 1000)::bigint) as e,
                row_number() over (partition by s.trace_id order by p.span_id is null desc, s.ts, s.span_id) = 1
                    as root,
                p.span_id is not null as has_parent
            from raw s left join raw p on s.trace_id = p.trace_id and s.parent_span_id = p.span_id),
        last_child as (
            select * from steps where has_parent
            qualify row_number() over (partition by trace_id, parent_span_id order by e desc, span_id) = 1),
        walk as (
            select trace_id, span_id, null::varchar as path, 0 as depth from steps where root
            union all
            select w.trace_id, c.span_id, coalesce(w.path || ' > ', '') || c.name, depth + 1
            from walk w join last_child c on w.trace_id = c.trace_id and w.span_id = c.parent_span_id
            where depth < 1000),
        traces as (
            select trace_id, any_value(name) filter (where root) as root_name,
                string_agg(name, ' > ' order by ts, span_id) filter (where not root) as rest,
                count(*) - 1 as steps, coalesce(any_value(duration_ms) filter (where root),
                    (epoch_us(max(e)) - epoch_us(min(ts))) / 1000) as duration,
                sum(tokens) as tokens, sum(cost) as cost,
                arg_max(name, (duration_ms, -epoch_us(ts))) filter (where not root) as slowest,
                max(duration_ms) filter (where not root) as slowest_ms
            from steps group by trace_id),
        sequences as (
            select trace_id, count(*) > 2 and bool_and(ts >= coalesce(previous_end, ts)) as sequential
            from (select *, lag(e) over (partition by trace_id order by ts, span_id) as previous_end
                  from steps where not root)
            group by trace_id),
        described as (
            select root_name || coalesce(': ' || rest, '') as shape, steps, duration, tokens, cost, slowest,
                slowest_ms / nullif(duration, 0) as share, coalesce(sequential, false) as sequential,
                root_name || coalesce(
                    ': ' || (select arg_max(path, depth) from walk where walk.trace_id = traces.trace_id), ''
                ) as critical_path
            from traces left join sequences using (trace_id)),
        paths as (
            select shape, critical_path, count(*) as n from described group by shape, critical_path
            qualify row_number() over (partition by shape order by n desc, critical_path) = 1),
        slow as (
            select shape, slowest, count(*) as n, avg(share) from described where slowest is not null
            group by shape, slowest
            qualify row_number() over (partition by shape order by n desc, slowest) = 1)
        select shape, count(*) as traces, avg(steps) as steps_per_trace, avg(duration),
            quantile_cont(duration, 0.95), any_value(paths.critical_path), any_value(paths.n),
            any_value(slow.slowest), any_value(slow.n), count(*) filter (where sequential) as sequential_traces,
            coalesce(sum(tokens) filter (where sequential), 0) as sequential_tokens,
            sum(cost) filter (where sequential) as sequential_cost_usd
        from described join paths using (shape) left join slow using (shape) group by shape""",
    "ads.data_quality": """
        with attempts as (
            select table_name, "partition", count(*) as attempts, count(*) filter (where status = 'failed'),
                arg_max(status, started_at), arg_max(delta_version, started_at) filter (where status = 'published'),
                arg_max(rows_in, started_at), arg_max(rows_published, started_at),
                arg_max(rows_rejected, started_at), arg_max(rules_failed, started_at), arg_max(message, started_at),
                min(started_at + to_microseconds(cast(round(duration_ms * 1000) as bigint)))
                    filter (where status = 'published') as first_published_at
            from delta_scan('{lake}/ops/audit_log')
            where "partition" like '%event_date = ''{day}''%' group by all),  -- a write of several days: on each
        rules as (
            select target_table, list(rule order by n desc, rule) as rules, list(n order by n desc, rule) as counts
            from (select target_table, rule, count(*) as n
                  from (select target_table, unnest(rules) as rule from delta_scan('{lake}/dwd/quarantine')
                        where event_date = date '{day}') group by all)
            group by all)
        select attempts.*, books.ods_rows, books.duplicates, books.quarantined, books.malformed, books.balanced,
            rules.rules, rules.counts,
            (epoch(first_published_at) - epoch(date '{day}'::timestamp)) / 3600 as lag_hours
        from attempts
        left join (select * from delta_scan('{lake}/ops/books') where event_date = date '{day}') books
            using (table_name)
        left join rules on rules.target_table = attempts.table_name""",
}


def _cache() -> Path:
    from contracts import load_contract
    from synthetic_workload import GENERATOR_VERSION
    from warehouse.storage.lake import LOOKUP_COLUMNS

    root = Path(os.environ.get("STRATA_BENCH_CACHE", Path(__file__).resolve().parents[1] / ".strata" / "bench-cache"))
    version = load_contract("dwd.request").version
    # the files' layout too: a lake written before the Bloom filters on trace_id has none (bench_trace reads it)
    lookups = "-bloom-" + "-".join(LOOKUP_COLUMNS)
    return root / f"ads-week-{DAYS}x{REQUESTS_PER_DAY}-seed{SEED}-gen{GENERATOR_VERSION}-dwd{version}{lookups}"


def week_lake() -> tuple[Path, dict]:
    """The week's lake, built to DWD once and kept: later runs reuse it, and so do ``bench_trace`` and
    ``bench_explain``; a run that finds another building it waits for that build (a lock beside the lake)."""
    import fcntl
    import shutil

    home = _cache()
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "manifest.json").exists():
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _BUILD_LAKE,
                    str(home),
                    str(DAYS),
                    str(REQUESTS_PER_DAY),
                    str(SEED),
                    START.isoformat(),
                    KEY,
                ],
                check=True,
            )
    return home, json.loads((home / "manifest.json").read_text())


def _ours(home: Path, days: list[str]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", _OURS, str(home), KEY, *days], capture_output=True, text=True, check=False
    )
    if proc.returncode:
        raise RuntimeError(f"ADS build failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _baseline(lake: str, days: list[str]) -> dict[str, float]:
    """Seconds per table, summed over the days, of the hand-written queries (each fetched to Arrow)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("LOAD delta")
    seconds = dict.fromkeys(_QUERIES, 0.0)
    for day in days:
        for name, sql in _QUERIES.items():
            started = time.perf_counter()
            con.execute(sql.format(lake=lake, day=day, **VARS)).to_arrow_table()
            seconds[name] += time.perf_counter() - started
    return seconds


#: What must agree per day between a published mart and its hand-written query.
_SAME = {
    "ads.model_daily": "count(*), sum(requests), sum(input_tokens), sum(cost_usd), sum(errors_timeout)",
    "ads.tenant_daily": (
        "count(*), sum(requests), sum(total_tokens), sum(cost_usd), count(*) filter (where is_over_quota)"
    ),
    "ads.latency_breakdown": "count(*), sum(requests), sum(staged_requests)",
    "ads.retry_storms": "count(*), sum(retries), sum(first_attempts)",
    "ads.version_mix": "count(*), sum(requests), sum(versions_serving)",
    "ads.capacity": "count(*), sum(requests), sum(peak_concurrency), sum(replicas_needed)",
    "ads.cold_starts": ("count(*), count(*) filter (where is_cold_start), count(*) filter (where is_slow_start)"),
    "ads.server_drift": "count(*), sum(steady_requests), count(*) filter (where is_drifting)",
    "ads.token_anomalies": "count(*), sum(requests), sum(baseline_days), count(*) filter (where is_flagged)",
    "ads.retry_policy": (
        "count(*), sum(retries), sum(non_retryable_retries), sum(long_chains), sum(retry_tokens), sum(retry_cost_usd)"
    ),
    "ads.trace_breakdown": "count(*), sum(traces), sum(sequential_traces), sum(sequential_tokens)",
    # The ADS tables' own writes of the day are listed from the build after the one that made them.
    "ads.data_quality": "count(*) filter (where table_name not like 'ads.%')",
}


def _same_tables(lake: str, days: list[str]) -> None:
    """Both ways compute the same tables: per day, rows and the sums of counts, tokens and cost agree."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("LOAD delta")
    for day in days:
        for name, columns in _SAME.items():
            layer, table = name.split(".")
            mine = con.execute(
                f"select {columns} from delta_scan('{lake}/{layer}/{table}') where event_date = date '{day}'"
            ).fetchone()
            sql = _QUERIES[name].format(lake=lake, day=day, **VARS)
            theirs = con.execute(f"select {columns} from ({sql})").fetchone()
            if mine != theirs:
                raise AssertionError(f"{name} {day}: dbt's table {mine} differs from the hand-written query's {theirs}")


def run(workdir: Path) -> list[Measurement]:
    home, manifest = week_lake()
    days = sorted(manifest["days"])
    lake = str(home / "lake")
    before = _baseline(lake, days)
    ours = _ours(home, days)
    after = _baseline(lake, days)
    _same_tables(lake, days)
    baseline = {name: (before[name] + after[name]) / 2 for name in _QUERIES}
    spent = _Spent.of(ours)
    return _build_times(days, spent, baseline) + _fixed_costs(days, ours, spent.total, sum(baseline.values()))


@dataclass(frozen=True)
class _Spent:
    """Our seconds over all the days: each table's dbt model, the models the marts share (staging views,
    intermediate models such as ``int_instances``: every model that is not a mart), each table's publishing."""

    models: dict[str, float]
    shared: float
    publish: dict[str, float]

    @classmethod
    def of(cls, ours: list[dict]) -> _Spent:
        return cls(
            models={name: sum(day["models"].get(name.split(".")[1], 0.0) for day in ours) for name in _QUERIES},
            shared=sum(s for day in ours for name, s in day["models"].items() if f"ads.{name}" not in _QUERIES),
            publish={name: sum(day["publish"][name] for day in ours) for name in _QUERIES},
        )

    @property
    def total(self) -> float:
        return sum(self.models.values()) + self.shared + sum(self.publish.values())


def _build_times(days: list[str], spent: _Spent, baseline: dict[str, float]) -> list[Measurement]:
    """Our models + publishing against the hand-written queries: in all, by part, and table by table."""
    models, shared, publish = spent.models, spent.shared, spent.publish
    ours_s = spent.total
    baseline_s = sum(baseline.values())
    results = [
        Measurement(
            f"ADS for {len(days)} days × {REQUESTS_PER_DAY:,} requests: dbt models + publishing",
            ours_s,
            "s",
            "hand-written DuckDB queries, same tables",
            baseline_s,
            higher_is_better=False,
            target_ratio=0.5,
        ),
        Measurement(
            "… dbt models alone (per-model timings, the shared ones included)",
            sum(models.values()) + shared,
            "s",
            "hand-written DuckDB queries, same tables",
            baseline_s,
            higher_is_better=False,
        ),
        Measurement(
            "… the models the marts share (staging views, intermediate models), counted once",
            shared,
            "s",
            "hand-written DuckDB queries, same tables",
            baseline_s,
            higher_is_better=False,
        ),
        Measurement(
            "… publishing alone (row checks, audit, Delta commit, audit log)",
            sum(publish.values()),
            "s",
            "hand-written DuckDB queries, same tables",
            baseline_s,
            higher_is_better=False,
        ),
    ]
    for name in _QUERIES:
        results.append(
            Measurement(
                f"  {name}: dbt model + publishing (without the shared models)",
                models[name] + publish[name],
                "s",
                "its hand-written query",
                baseline[name],
                higher_is_better=False,
            )
        )
    return results


def _fixed_costs(days: list[str], ours: list[dict], ours_s: float, baseline_s: float) -> list[Measurement]:
    """What each build spends besides its models: dbt's start-up, its tests, and the builds' wall time."""
    startup = [day["startup_s"] for day in ours]
    return [
        Measurement(
            "dbt fixed start-up, first build (import dbt, parse, connect)",
            startup[0],
            "s",
            "the day's models + publishing",
            sum(ours[0]["models"].values()) + sum(ours[0]["publish"].values()),
            higher_is_better=False,
        ),
        Measurement(
            "dbt fixed start-up, later builds (parse, connect), mean",
            sum(startup[1:]) / max(len(startup) - 1, 1),
            "s",
            "a day's models + publishing, mean",
            ours_s / len(days),
            higher_is_better=False,
        ),
        Measurement(
            "dbt data and unit tests, per build (mean)",
            sum(day["tests_s"] for day in ours) / len(days),
            "s",
            "a day's models + publishing, mean",
            ours_s / len(days),
            higher_is_better=False,
        ),
        Measurement(
            "wall time of the week's builds (everything)",
            sum(day["wall_s"] for day in ours),
            "s",
            "hand-written DuckDB queries, same tables",
            baseline_s,
            higher_is_better=False,
        ),
    ]
