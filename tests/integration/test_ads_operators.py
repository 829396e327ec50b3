"""The operators' marts (capacity, cold starts, server drift, token anomalies, retry policy, trace
breakdown) against a generated week: every planted pattern is flagged with its entity and time, nothing
else is, and every numeric column equals an independent recomputation from DWD in polars."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from itertools import pairwise

import polars as pl
import pytest
import yaml  # type: ignore[import-untyped]
from polars.testing import assert_frame_equal

from tests.integration.test_ads import build_lake
from warehouse.ads.project import PROJECT_DIR
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


# ---- token anomalies, retry policy, trace breakdown ------------------------------------------------------------------

#: The thresholds of the build: the dbt project's vars, as the marts read them.
VARS = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text(encoding="utf-8"))["vars"]


def model_calls(settings: Settings) -> pl.DataFrame:
    return dwd_requests(settings).filter(pl.col("model").is_not_null())


def planted(manifest: dict, kind: str) -> list[dict]:
    """The generator's planted events of one kind, their event_date as a date."""
    return [{**e, "event_date": dt.date.fromisoformat(str(e["event_date"]))} for e in manifest["planted"][kind]]


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
    for w in workflows:
        row = mine[(w["event_date"], w["shape"])]
        assert (row["traces"], row["steps_per_trace"]) == (w["traces"], w["steps"]), w
        assert row["sequential_traces"] == (w["traces"] if w["sequential"] else 0), w
        if w["slow_step"] is None:
            continue
        if 2 * w["slow_traces"] > w["traces"]:  # the planted slow step is the most common slowest one
            assert (row["slowest_step"], row["slowest_step_traces"]) == (w["slow_step"], w["slow_traces"]), w
        else:  # another step is the slowest in most traces, and in none of those it was planted in
            assert row["slowest_step"] != w["slow_step"], w
            assert row["slowest_step_traces"] <= w["traces"] - w["slow_traces"], w
