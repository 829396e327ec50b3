"""The operators' marts (capacity, cold starts, server drift, token anomalies, retry policy, trace
breakdown) against a generated week: every planted pattern is flagged with its entity and time, nothing
else is, and every numeric column equals an independent recomputation from DWD in polars."""

from __future__ import annotations

import datetime as dt
import math
import shutil
from collections import Counter
from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
import yaml  # type: ignore[import-untyped]
from polars.testing import assert_frame_equal

from tests.integration.test_ads import build_lake
from warehouse.ads.build import MARTS, build
from warehouse.ads.project import PROJECT_DIR, DbtFailed
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_REQUEST, DWD_SPAN, table

#: A week at the smallest scale at which every planted pattern stands out (see docs/ads.md).
WEEK_DAYS = 7
WEEK_REQUESTS_PER_DAY = 40_000


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict]:
    """A generated week, landed, built through DWD and ADS; the settings and the generator's manifest."""
    return build_lake(
        tmp_path_factory.mktemp("home"),
        tmp_path_factory.mktemp("landing"),
        days=WEEK_DAYS,
        requests_per_day=WEEK_REQUESTS_PER_DAY,
        seed=5,
    )


def ads(settings: Settings, name: str) -> pl.DataFrame:
    return pl.read_delta(table(f"ads.{name}").uri(settings))


def dwd_requests(settings: Settings) -> pl.DataFrame:
    return pl.read_delta(DWD_REQUEST.uri(settings))


# ---- capacity, cold starts, server drift ------------------------------------------------------------

#: The dbt vars' defaults these marts were built with (warehouse/ads/dbt_project.yml).
WARMUP, LOOKBACK, INSTANCE_CONCURRENCY, HEADROOM = 20, dt.timedelta(minutes=60), 8, 0.25


def assert_frames_close(ours: pl.DataFrame, theirs: pl.DataFrame, key: list[str]) -> None:
    """Same rows and columns; integers, flags, names and times equal, floats to 1e-9 (1e-6 absolute)."""
    ours, theirs = ours.sort(key), theirs.select(ours.columns).sort(key)
    assert ours.height == theirs.height
    for name in ours.columns:
        mine, other = ours[name].to_list(), theirs[name].to_list()
        if ours[name].dtype.is_float():
            for a, b in zip(mine, other, strict=True):
                assert (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)), (
                    name,
                    a,
                    b,
                )
        else:
            assert mine == other, name


def per_minute_peaks(calls: pl.DataFrame) -> pl.DataFrame:
    """Per day and model: the busiest whole minute and the busiest 10 consecutive minutes (a sorted scan)."""
    minutes = (
        calls.group_by("event_date", "model", pl.col("ts").dt.truncate("1m").alias("minute"))
        .len("n")
        .sort("event_date", "model", "minute")
    )
    ten = minutes.rolling("minute", period="10m", offset="0m", closed="left", group_by=["event_date", "model"]).agg(
        pl.col("n").sum().alias("n10")
    )
    first = ["event_date", "model"]
    one = minutes.sort("n", "minute", descending=[True, False]).group_by(first).first()
    ten = ten.sort("n10", "minute", descending=[True, False]).group_by(first).first()
    return one.select(*first, peak_1m_start="minute", peak_qps_1m=pl.col("n") / 60).join(
        ten.select(*first, peak_10m_start="minute", peak_qps_10m=pl.col("n10") / 600), on=first
    )


def concurrency_peaks(calls: pl.DataFrame) -> pl.DataFrame:
    """Per day and model: the most requests in flight (a sweep line, ends before starts) and when first."""
    timed = calls.filter(pl.col("duration_ms").is_not_null())
    ends = pl.col("ts") + pl.duration(microseconds=(pl.col("duration_ms") * 1000).round().cast(pl.Int64))
    events = pl.concat(
        [
            timed.select("event_date", "model", at="ts", change=pl.lit(1)),
            timed.select("event_date", "model", at=ends, change=pl.lit(-1)),
        ]
    ).sort("event_date", "model", "at", "change")
    swept = events.with_columns(flight=pl.col("change").cum_sum().over("event_date", "model"))
    return (
        swept.sort("flight", "at", descending=[True, False])
        .group_by("event_date", "model")
        .first()
        .select("event_date", "model", peak_concurrency="flight", peak_concurrency_at="at")
    )


def test_capacity_equals_a_recomputation_from_dwd(week: tuple[Settings, dict]) -> None:
    settings, _ = week
    calls = dwd_requests(settings).filter(pl.col("model").is_not_null())
    ok = pl.col("status_code") < 400
    daily = calls.group_by("event_date", "model").agg(
        requests=pl.len(),
        mean_latency_ms=pl.col("duration_ms").filter(ok).mean(),
        instances_active=pl.col("server_instance").drop_nulls().n_unique().cast(pl.Int64),
    )
    expected = (
        daily.join(per_minute_peaks(calls), on=["event_date", "model"])
        .join(concurrency_peaks(calls), on=["event_date", "model"], how="left")
        .with_columns(
            mean_qps=pl.col("requests") / 86_400,
            littles_law_concurrency=pl.col("peak_qps_1m") * pl.col("mean_latency_ms") / 1000,
            peak_concurrency_per_instance=pl.when(pl.col("instances_active") > 0).then(
                pl.col("peak_concurrency") / pl.col("instances_active")
            ),
            instance_concurrency=pl.lit(INSTANCE_CONCURRENCY, pl.Int64),
            headroom=pl.lit(HEADROOM),
            replicas_needed=(pl.col("peak_concurrency") * (1 + HEADROOM) / INSTANCE_CONCURRENCY).ceil().cast(pl.Int64),
        )
    )
    capacity = ads(settings, "capacity")
    assert capacity.height > 0 and capacity["peak_concurrency"].max() > 1
    assert_frames_close(capacity, expected.with_columns(pl.col("requests").cast(pl.Int64)), ["event_date", "model"])


def instance_requests(dwd: pl.DataFrame) -> pl.DataFrame:
    """Every request of a known instance: its number in the instance's life, the tokens before it, its latency
    relative to the model's median in the hour outside every instance's first WARMUP requests."""
    known = dwd.filter(pl.col("server").is_not_null() & pl.col("server_instance").is_not_null())
    life = ["server", "server_instance"]
    tokens = pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)
    numbered = known.sort("ts", "request_id").with_columns(
        number=pl.int_range(1, pl.len() + 1).over(life),
        tokens=tokens,
        tokens_before=(tokens.cum_sum() - tokens).over(life),
        latency=pl.when((pl.col("status_code") < 400) & pl.col("model").is_not_null()).then(pl.col("duration_ms")),
        hour=pl.col("ts").dt.truncate("1h"),
    )
    baselines = (
        numbered.filter((pl.col("number") > WARMUP) & pl.col("latency").is_not_null())
        .group_by("model", "hour")
        .agg(baseline=pl.col("latency").median())
    )
    return numbered.join(baselines, on=["model", "hour"], how="left").with_columns(
        warmup=pl.col("number") <= WARMUP, relative=pl.col("latency") / pl.col("baseline")
    )


def instances(dwd: pl.DataFrame) -> pl.DataFrame:
    """Per instance: first and last request, neighbours, the cold-start rule, warm-up and steady life, the fit."""
    lake_start = dwd["ts"].min()
    steady = (pl.col("relative") > 0) & ~pl.col("warmup")  # a latency of 0 has no log: no point of the fit
    # The mart fits in exact decimals: log relative latency to the millionth, tokens in millions.
    x, y = (pl.col("tokens_before") / 1e6).filter(steady), pl.col("relative").log().round(6).filter(steady)
    fitted = (
        instance_requests(dwd)
        .group_by("server", "server_instance")
        .agg(
            first_seen_at=pl.col("ts").min(),
            last_seen_at=pl.col("ts").max(),
            requests=pl.len().cast(pl.Int64),
            tokens_processed=pl.col("tokens").sum().cast(pl.Int64),
            warmup_requests=pl.col("relative").filter(pl.col("warmup")).count().cast(pl.Int64),
            warmup_latency_ms=pl.col("latency").filter(pl.col("warmup")).median(),
            warmup_latency_ratio=pl.col("relative").filter(pl.col("warmup")).median(),
            steady_requests=y.count().cast(pl.Int64),
            steady_mean=y.mean(),
            slope_per_million_tokens=(pl.cov(x, y, ddof=0) / x.var(ddof=0)).fill_nan(None),  # null: no spread
            mean_x=x.mean(),
        )
        .with_columns(
            start_relative_latency=(
                pl.col("steady_mean") - pl.col("slope_per_million_tokens") * pl.col("mean_x")
            ).exp(),
            steady_relative_latency=pl.col("steady_mean").exp(),
            event_date=pl.col("first_seen_at").dt.date(),
            is_cold_start=pl.col("first_seen_at") > lake_start + LOOKBACK,
        )
    )
    order = fitted.sort("first_seen_at", "server_instance")
    return order.with_columns(
        previous_instance=pl.col("server_instance").shift(1).over("server"),
        next_instance=pl.col("server_instance").shift(-1).over("server"),
    )


def test_cold_starts_and_server_drift_equal_a_recomputation_from_dwd(week: tuple[Settings, dict]) -> None:
    settings, _ = week
    expected = instances(dwd_requests(settings))
    key = ["event_date", "server", "server_instance"]
    cold = expected.with_columns(
        is_slow_start=(pl.col("is_cold_start") & (pl.col("warmup_latency_ratio") > 3)).fill_null(False),
        cold_start_requests=pl.lit(WARMUP, pl.Int64),
        threshold_ratio=pl.lit(3.0),
    )
    assert_frames_close(ads(settings, "cold_starts"), cold, key)
    nexts = expected.select(
        "server", next_instance="server_instance", next_instance_relative_latency="steady_relative_latency"
    )
    increase = (pl.col("slope_per_million_tokens") * pl.col("tokens_processed") / 1e6).exp() - 1
    drifting = ((pl.col("steady_requests") >= 200) & (increase > 0.5)).fill_null(False)
    drift = (
        expected.join(nexts, on=["server", "next_instance"], how="left")
        .with_columns(predicted_increase=increase, is_drifting=drifting, threshold_increase=pl.lit(0.5))
        .with_columns(
            is_recovered=pl.when(pl.col("is_drifting") & pl.col("next_instance").is_not_null()).then(
                (pl.col("next_instance_relative_latency") <= 1.25 * pl.col("start_relative_latency")).fill_null(False)
            )
        )
    )
    assert_frames_close(ads(settings, "server_drift"), drift, key)


def planted(manifest: dict, kind: str) -> list[dict]:
    """The generator's planted events of one kind (``manifest["planted"]``), their event_date as a date."""
    return [{**e, "event_date": dt.date.fromisoformat(str(e["event_date"]))} for e in manifest["planted"][kind]]


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_every_planted_instance_start_is_a_slow_cold_start_and_nothing_else_is(week: tuple[Settings, dict]) -> None:
    settings, manifest = week
    starts = planted(manifest, "instance_starts")
    flagged = ads(settings, "cold_starts").filter("is_slow_start")
    found = {(r["server"], r["server_instance"]): r for r in flagged.iter_rows(named=True)}
    assert set(found) == {(s["server"], s["server_instance"]) for s in starts}
    for start in starts:
        row = found[(start["server"], start["server_instance"])]
        assert row["event_date"] == start["event_date"] and row["is_cold_start"]
        assert row["first_seen_at"] == at(start["first_request_at"])


def test_the_planted_drift_is_flagged_and_recovered_by_the_next_instance(week: tuple[Settings, dict]) -> None:
    settings, manifest = week
    drifts = planted(manifest, "drifting_instances")
    flagged = ads(settings, "server_drift").filter("is_drifting")
    found = {(r["server"], r["server_instance"]): r for r in flagged.iter_rows(named=True)}
    assert set(found) == {(d["server"], d["server_instance"]) for d in drifts}
    for drift in drifts:
        row = found[(drift["server"], drift["server_instance"])]
        assert row["event_date"] == drift["event_date"]
        assert row["next_instance"] == drift["next_instance"] and row["is_recovered"]


def test_each_planted_peak_is_its_models_busiest_ten_minutes(week: tuple[Settings, dict]) -> None:
    settings, manifest = week
    capacity = ads(settings, "capacity")
    for peak in planted(manifest, "peaks"):
        row = capacity.filter((pl.col("event_date") == peak["event_date"]) & (pl.col("model") == peak["model"]))
        slack = dt.timedelta(minutes=1)
        assert at(peak["start"]) - slack <= row["peak_10m_start"].item() <= at(peak["end"]) + slack, peak


def test_a_capacity_of_the_wrong_type_fails_the_build_and_publishes_nothing(
    week: tuple[Settings, dict], tmp_path: Path
) -> None:
    settings, manifest = week
    project = tmp_path / "ads"
    shutil.copytree(PROJECT_DIR, project, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    sql = project / "models" / "marts" / "capacity.sql"
    sql.write_text(sql.read_text().replace("as bigint) as instance_concurrency", "as varchar) as instance_concurrency"))
    versions = {m.name: Lake(settings).version(m) for m in MARTS}
    with pytest.raises(DbtFailed) as failed:
        build(Lake(settings), [dt.date.fromisoformat(min(manifest["days"]))], project_dir=project)
    message = str(failed.value)
    assert "model capacity" in message and "enforced contract" in message and "instance_concurrency" in message
    assert {m.name: Lake(settings).version(m) for m in MARTS} == versions


# ---- token anomalies, retry policy, trace breakdown ------------------------------------------------------------------

#: The thresholds of the build: the dbt project's vars, as the marts read them.
VARS = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text(encoding="utf-8"))["vars"]


def model_calls(settings: Settings) -> pl.DataFrame:
    return dwd_requests(settings).filter(pl.col("model").is_not_null())


def same(mine: pl.DataFrame, theirs: pl.DataFrame, key: list[str]) -> None:
    """Equal frames, row for row by key (floats to a relative 1e-9)."""
    assert_frame_equal(mine.select(theirs.columns).sort(key), theirs.sort(key), check_dtypes=False, rel_tol=1e-9)


def test_token_anomalies_equal_a_trailing_median_recomputed_from_dwd(week: tuple[Settings, dict]) -> None:
    settings, _ = week
    tokens = pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)
    daily = (
        model_calls(settings)
        .group_by("event_date", "tenant_id")
        .agg(requests=pl.len(), tokens=tokens.sum())
        .with_columns(tokens_per_request=pl.col("tokens") / pl.col("requests"))
        .drop("tokens")
    )
    before = daily.rename({"event_date": "before", "requests": "before_requests", "tokens_per_request": "before_tpr"})
    baselines = (
        daily.join(before, on="tenant_id", how="left")
        .filter(
            (pl.col("before") < pl.col("event_date")) & (pl.col("before") >= pl.col("event_date") - dt.timedelta(7))
        )
        .group_by("event_date", "tenant_id")
        .agg(baseline_days=pl.len(), median_requests=pl.median("before_requests"), median_tpr=pl.median("before_tpr"))
    )
    enough = pl.col("baseline_days") >= VARS["token_anomaly_min_days"]
    expected = (
        daily.join(baselines, on=["event_date", "tenant_id"], how="left")
        .with_columns(
            baseline_days=pl.col("baseline_days").fill_null(0),
            median_requests=pl.when(enough).then(pl.col("median_requests")),
            median_tokens_per_request=pl.when(enough).then(pl.col("median_tpr")),
        )
        .with_columns(
            request_ratio=pl.col("requests") / pl.col("median_requests"),
            token_ratio=pl.col("tokens_per_request") / pl.col("median_tokens_per_request").replace(0, None),
        )
        .with_columns(
            is_flagged=(
                (pl.col("requests") >= VARS["token_anomaly_min_requests"])
                & (pl.col("token_ratio") >= VARS["token_anomaly_multiple"])
                & ((pl.col("request_ratio") - 1).abs() <= VARS["token_anomaly_request_band"])
            ).fill_null(False)
        )
        .drop("median_tpr")
    )
    same(ads(settings, "token_anomalies"), expected, ["event_date", "tenant_id"])


def test_retry_policy_equals_the_chains_recomputed_from_dwd(week: tuple[Settings, dict]) -> None:
    settings, _ = week
    attempts = (
        dwd_requests(settings)
        .with_columns(chain=pl.coalesce("retry_of", "request_id"))
        .sort("ts", "request_id")
        .with_columns(
            attempt_number=pl.int_range(1, pl.len() + 1).over("chain"),
            previous_status=pl.col("status_code").shift(1).over("chain"),
        )
        .filter(pl.col("model").is_not_null())
    )
    key = ["event_date", "tenant_id", "model"]
    chains = (
        attempts.group_by(*key, "chain")
        .agg(length=pl.max("attempt_number"), retried=pl.col("is_retry").any())
        .filter("retried")
        .group_by(key)
        .agg(
            chains=pl.len(),
            long_chains=(pl.col("length") > VARS["retry_chain_limit"]).sum(),
            longest_chain=pl.max("length"),
        )
    )
    non_retryable = pl.col("previous_status").is_between(400, 499) & ~pl.col("previous_status").is_in([408, 429])
    retries = (
        attempts.filter("is_retry")
        .group_by(key)
        .agg(
            retries=pl.len(),
            non_retryable_retries=non_retryable.sum(),
            retry_tokens=(pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)).sum(),
            retry_inference_ms=pl.when(pl.col("inference_ms").count() > 0).then(pl.col("inference_ms").sum().round(3)),
            retry_cost_usd=pl.col("cost_usd").round(9).sum(),
        )
    )
    expected = retries.join(chains, on=key).with_columns(
        chain_limit=pl.lit(VARS["retry_chain_limit"]),
        is_flagged=(pl.col("non_retryable_retries") > 0) | (pl.col("long_chains") > 0),
    )
    mine = ads(settings, "retry_policy").with_columns(pl.col("retry_cost_usd").cast(pl.Float64))
    same(mine.with_columns(pl.col("retry_inference_ms").round(3)), expected, key)


def test_token_anomalies_and_retry_policy_flag_every_planted_event_and_nothing_else(
    week: tuple[Settings, dict],
) -> None:
    settings, manifest = week
    anomalies = ads(settings, "token_anomalies").filter("is_flagged")
    jumps = planted(manifest, "token_jumps")
    assert jumps and set(anomalies.select("tenant_id", "event_date").iter_rows()) == {
        (j["tenant_id"], j["event_date"]) for j in jumps
    }
    for jump in jumps:  # the jump's factor, seen against the baseline
        row = anomalies.filter(pl.col("tenant_id") == jump["tenant_id"]).row(0, named=True)
        assert row["token_ratio"] == pytest.approx(jump["factor"], rel=0.2), jump
    policy = ads(settings, "retry_policy")
    flagged = {r["tenant_id"]: r for r in policy.filter("is_flagged").iter_rows(named=True)}
    bad, unbounded = planted(manifest, "non_retryable_retries"), planted(manifest, "unbounded_chains")
    assert bad and unbounded
    key = ("tenant_id", "event_date", "model")
    assert {tuple(r[k] for k in key) for r in flagged.values()} == {tuple(e[k] for k in key) for e in bad + unbounded}
    for e in bad:
        assert flagged[e["tenant_id"]]["non_retryable_retries"] == e["retries"], e
    for e in unbounded:
        row = flagged[e["tenant_id"]]
        assert (row["long_chains"], row["longest_chain"]) == (e["chains"], e["longest"]), e
    clean = policy.filter(~pl.col("is_flagged"))  # storms, faults and abusers retry within the policy
    assert (clean["non_retryable_retries"] == 0).all() and (clean["longest_chain"] <= VARS["retry_chain_limit"]).all()


def trace_steps(settings: Settings) -> pl.DataFrame:
    """Every step of the week's multi-call traces (calls with a span id, and their traces' dwd.span rows)."""
    calls = dwd_requests(settings).filter(pl.col("span_id").is_not_null())
    multi = calls.group_by("event_date", "trace_id").len().filter(pl.col("len") >= 2).drop("len")
    steps = calls.select(
        "event_date",
        "trace_id",
        "span_id",
        "parent_span_id",
        pl.col("operation").alias("name"),
        "ts",
        "duration_ms",
        tokens=pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0),
        cost=pl.col("cost_usd").round(9),
    )
    if Lake(settings).open_table(DWD_SPAN) is not None:
        spans = pl.read_delta(DWD_SPAN.uri(settings)).select(
            "event_date", "trace_id", "span_id", "parent_span_id", "name", "ts", "duration_ms"
        )
        steps = pl.concat([steps, spans], how="diagonal_relaxed")
    return steps.join(multi, on=["event_date", "trace_id"]).with_columns(
        ends=pl.col("ts") + pl.duration(microseconds=(pl.col("duration_ms").fill_null(0) * 1000).round()),
    )


def describe_trace(steps: list[dict]) -> dict:
    """One trace, walked by hand: its shape, duration, critical path, slowest step and whether it ran in sequence."""
    ids = {s["span_id"] for s in steps}
    order = sorted(steps, key=lambda s: (s["ts"], s["span_id"]))
    root = next(s for s in order if s["parent_span_id"] not in ids)
    rest = [s for s in order if s is not root]
    if root["duration_ms"] is not None:
        duration = root["duration_ms"]
    else:
        duration = (max(s["ends"] for s in steps) - min(s["ts"] for s in steps)).total_seconds() * 1000
    path, at = [], root
    while children := [s for s in steps if s["parent_span_id"] == at["span_id"] and s is not root]:
        at = min(children, key=lambda s: (-s["ends"].timestamp(), s["span_id"]))
        path.append(at["name"])
    timed = [s for s in rest if s["duration_ms"] is not None]
    slowest = min(timed, key=lambda s: (-s["duration_ms"], s["ts"], s["span_id"])) if timed else None
    in_sequence = all(b["ts"] >= a["ends"] for a, b in pairwise(rest))
    return {
        "shape": root["name"] + (": " + " > ".join(s["name"] for s in rest) if rest else ""),
        "steps": len(rest),
        "duration": duration,
        "critical_path": root["name"] + (": " + " > ".join(path) if path else ""),
        "slowest": slowest["name"] if slowest else None,
        "share": slowest["duration_ms"] / duration if slowest and duration else None,
        "sequential": len(rest) > 2 and in_sequence,
        "tokens": sum(s["tokens"] or 0 for s in steps),
        "costs": [s["cost"] for s in steps if s["cost"] is not None],
    }


def most_common(values: list[str]) -> tuple[str, int]:
    counts = Counter(values)
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def test_trace_breakdown_equals_the_trace_trees_walked_from_dwd(week: tuple[Settings, dict]) -> None:
    settings, _ = week
    traces: dict[tuple[dt.date, str], list[dict]] = {}
    for step in trace_steps(settings).iter_rows(named=True):
        traces.setdefault((step["event_date"], step["trace_id"]), []).append(step)
    shapes: dict[tuple[dt.date, str], list[dict]] = {}
    for (day, _), steps in traces.items():
        trace = describe_trace(steps)
        shapes.setdefault((day, trace["shape"]), []).append(trace)
    rows = []
    for (day, shape), these in shapes.items():
        path, path_traces = most_common([t["critical_path"] for t in these])
        slow, slow_traces = most_common([t["slowest"] for t in these if t["slowest"] is not None])
        sequential = [t for t in these if t["sequential"]]
        costs = [c for t in sequential for c in t["costs"]]
        rows.append(
            {
                "event_date": day,
                "shape": shape,
                "traces": len(these),
                "steps_per_trace": sum(t["steps"] for t in these) / len(these),
                "duration_mean_ms": sum(t["duration"] for t in these) / len(these),
                "duration_p95_ms": pl.Series([t["duration"] for t in these]).quantile(0.95, "linear"),
                "critical_path": path,
                "critical_path_traces": path_traces,
                "slowest_step": slow,
                "slowest_step_traces": slow_traces,
                "slowest_step_share": sum(t["share"] for t in these if t["slowest"] == slow) / slow_traces,
                "sequential_traces": len(sequential),
                "sequential_tokens": sum(t["tokens"] for t in sequential),
                "sequential_cost_usd": sum(costs) if costs else None,
            }
        )
    mine = ads(settings, "trace_breakdown").with_columns(pl.col("sequential_cost_usd").cast(pl.Float64))
    assert rows and mine.height == len(rows)
    same(mine, pl.DataFrame(rows), ["event_date", "shape"])


def test_trace_breakdown_finds_every_planted_workflow(week: tuple[Settings, dict]) -> None:
    settings, manifest = week
    mine = {(r["event_date"], r["shape"]): r for r in ads(settings, "trace_breakdown").iter_rows(named=True)}
    workflows = planted(manifest, "workflows")
    assert workflows and set(mine) == {(w["event_date"], w["shape"]) for w in workflows}
    slow_steps = {w["shape"]: w["slow_step"] for w in workflows if w["slow_step"] is not None}
    assert slow_steps, "no slow step planted"
    for w in workflows:
        row = mine[(w["event_date"], w["shape"])]
        assert (row["traces"], row["steps_per_trace"]) == (w["traces"], w["steps"]), w
        assert row["sequential_traces"] == (w["traces"] if w["sequential"] else 0), w
        if w["slow_step"] is not None:  # the planted slow step is the shape's slowest, in exactly its traces
            assert (row["slowest_step"], row["slowest_step_traces"]) == (w["slow_step"], w["slow_traces"]), w
        elif w["shape"] in slow_steps:  # the shape on a day without it: another step is the slowest
            assert row["slowest_step"] != slow_steps[w["shape"]], w
