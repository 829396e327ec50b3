"""ADS against the generator's ground truth: dbt-duckdb builds the marts, publish writes them to Delta."""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl
import pytest

from strata import pipeline
from synthetic_workload import generate
from warehouse.ads.build import MARTS, build
from warehouse.ads.project import PROJECT_DIR, DbtFailed
from warehouse.errors import NoData
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import ADS_MODEL_DAILY, DWD_REQUEST, table

START = dt.date(2026, 3, 2)
DAYS = [START, START + dt.timedelta(days=1)]
#: The scale at which a planted storm stands out in one model's traffic (calibrated: see retry_storms.sql).
STORM_SCALE = 100_000


def build_lake(home: Path, landing: Path, *, days: int, requests_per_day: int, seed: int) -> tuple[Settings, dict]:
    """Generate, land, load the reference data, build DWD for the days, then ADS in one run."""
    settings = load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    manifest = generate(landing, days=days, requests_per_day=requests_per_day, seed=seed, start=START, fault_rate=0.01)
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    pipeline.load_quotas(settings, landing / "quotas.csv")
    for day in manifest["days"]:  # the days with traffic (later days hold only late feedback)
        pipeline.build_dwd(settings, dt.date.fromisoformat(day))
    build(Lake(settings), [dt.date.fromisoformat(d) for d in manifest["days"]])
    return settings, manifest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict, Path]:
    landing = tmp_path_factory.mktemp("landing")
    settings, manifest = build_lake(
        tmp_path_factory.mktemp("home"), landing, days=2, requests_per_day=STORM_SCALE, seed=3
    )
    return settings, manifest, landing


def ads(settings: Settings, name: str) -> pl.DataFrame:
    return pl.read_delta(table(f"ads.{name}").uri(settings))


def dwd_requests(settings: Settings) -> pl.DataFrame:
    return pl.read_delta(DWD_REQUEST.uri(settings))


def test_model_daily_equals_the_manifest(built: tuple[Settings, dict, Path]) -> None:
    settings, manifest, _ = built
    daily = ads(settings, "model_daily")
    for day in DAYS:
        rows = daily.filter(pl.col("event_date") == day)
        for model, truth in manifest["days"][day.isoformat()]["models"].items():
            mine = rows.filter(pl.col("model") == model)
            if not truth["requests"]:
                assert mine.is_empty()
                continue
            sums = mine.select(pl.exclude("event_date", "model", "model_version").sum()).row(0, named=True)
            for key in ("requests", "input_tokens", "output_tokens", "cached_input_tokens", "errors", "cache_hits"):
                assert sums[key] == truth[key], (day, model, key)
            for error_type, count in truth["errors_by_type"].items():
                assert sums[f"errors_{error_type}"] == count, (day, model, error_type)
            assert sums["errors_other"] == 0
            assert dict(zip(mine["model_version"], mine["requests"])) == truth["versions"], (day, model)
    # Labels come from DWD (the manifest knows feedback events, not the latest label per request).
    labels = (
        dwd_requests(settings)
        .with_columns(model_version=pl.col("model_version").fill_null("(none)"))
        .group_by("event_date", "model", "model_version")
        .agg(
            labelled=pl.col("feedback_kind").is_not_null().sum(),
            positive=(
                (pl.col("feedback_kind") == "thumb") & (pl.col("feedback_value") == "up")
                | (pl.col("feedback_kind") == "review") & (pl.col("feedback_value") == "ok")
            ).sum(),
        )
    )
    joined = daily.join(labels, on=["event_date", "model", "model_version"])
    assert joined.height == daily.height and joined["labelled"].eq(joined["labelled_requests"]).all()
    share = joined.filter(pl.col("labelled") > 0)
    assert share.height and (share["positive_feedback_share"] == share["positive"] / share["labelled"]).all()


def test_cost_per_tenant_is_prices_times_tokens_under_the_billing_rule(built: tuple[Settings, dict, Path]) -> None:
    settings, _, landing = built
    # Per-token prices in units of 1e-11 USD are whole numbers: the cost is computed exactly, in integers.
    prices = (
        pl.read_csv(landing / "prices.csv", infer_schema=False)
        .with_columns(
            pl.col("effective_from").str.to_datetime("%Y-%m-%d", time_zone="UTC"),
            *(
                pl.col(c).map_elements(lambda p: int(Decimal(p) * 10**8), return_dtype=pl.Int64)
                for c in ("input_price_per_1k", "output_price_per_1k", "cached_input_price_per_1k")
            ),
        )
        .sort("effective_from")
    )
    requests = (
        dwd_requests(settings)
        .sort("ts")
        .join_asof(
            prices, left_on="ts", right_on="effective_from", by="model", strategy="backward", check_sortedness=False
        )
    )
    refused = pl.col("status_code").is_between(400, 499)  # the generator's price list bills no refusals
    cached = pl.col("cached_input_tokens").fill_null(0)
    units = (
        (pl.col("input_tokens") - cached).clip(lower_bound=0) * pl.col("input_price_per_1k")
        + cached * pl.col("cached_input_price_per_1k")
        + pl.col("output_tokens") * pl.col("output_price_per_1k")
    )
    expected = (
        requests.with_columns(nano=pl.when(refused).then(0).otherwise((units + 50) // 100))
        .group_by("event_date", "tenant_id")
        .agg(pl.col("nano").sum())
    )
    tenants = ads(settings, "tenant_daily")
    joined = tenants.join(expected, on=["event_date", "tenant_id"], how="full", coalesce=True)
    assert joined.height == tenants.height == expected.height
    for row in joined.iter_rows(named=True):
        assert row["cost_usd"] == Decimal(row["nano"]).scaleb(-9), row
    assert (requests.filter(refused).height > 0) and tenants["unpriced_requests"].sum() == 0
    # DECIMAL sums: the tenants' costs add up to the day's total to the last digit.
    models = ads(settings, "model_daily")
    for day in DAYS:
        by_tenant = sum(tenants.filter(pl.col("event_date") == day)["cost_usd"].to_list(), Decimal(0))
        by_model = sum(models.filter(pl.col("event_date") == day)["cost_usd"].to_list(), Decimal(0))
        assert by_tenant == by_model > 0


def test_latency_percentiles_equal_duckdb_quantile_cont_over_dwd(built: tuple[Settings, dict, Path]) -> None:
    settings, _, _ = built
    con = duckdb.connect()
    con.execute("LOAD delta")
    expected = con.execute(f"""
        select event_date, model, coalesce(model_version, '(none)') as model_version,
               quantile_cont(duration_ms, 0.5) as p50, quantile_cont(duration_ms, 0.95) as p95,
               quantile_cont(duration_ms, 0.99) as p99, quantile_cont(ttft_ms, 0.5) as ttft50,
               quantile_cont(ttft_ms, 0.95) as ttft95
        from delta_scan('{DWD_REQUEST.uri(settings)}') where model is not null group by all""").pl()
    mine = ads(settings, "model_daily").join(expected, on=["event_date", "model", "model_version"])
    assert mine.height == expected.height == ads(settings, "model_daily").height
    for ours, theirs in (
        ("latency_p50_ms", "p50"),
        ("latency_p95_ms", "p95"),
        ("latency_p99_ms", "p99"),
        ("ttft_p50_ms", "ttft50"),
        ("ttft_p95_ms", "ttft95"),
    ):
        assert mine[ours].eq_missing(mine[theirs]).all(), ours
    stages = con.execute(f"""
        select event_date, model, quantile_cont(inference_ms, 0.95) as p95, avg(queue_ms) as queue_mean
        from delta_scan('{DWD_REQUEST.uri(settings)}')
        where duration_ms is not null and queue_ms is not null and preprocess_ms is not null
          and inference_ms is not null and postprocess_ms is not null
        group by all""").pl()
    breakdown = ads(settings, "latency_breakdown").join(stages, on=["event_date", "model"])
    assert breakdown.height == stages.height > 0
    assert breakdown["inference_p95_ms"].eq(breakdown["p95"]).all()
    assert (breakdown["queue_mean_ms"] - breakdown["queue_mean"]).abs().max() < 1e-9
    flagged = ads(settings, "latency_breakdown").filter(pl.col("is_outside_inference_high"))
    assert (flagged["outside_inference_share"] > 0.2).all() and flagged.height > 0


def storms_found(settings: Settings, manifest: dict) -> tuple[set[int], list[dict]]:
    """Planted storms (by index) that a storm window overlaps, and the windows that overlap none."""
    planted = [
        (s["tenant_id"], dt.datetime.fromisoformat(s["start"]), dt.datetime.fromisoformat(s["end"]))
        for s in manifest["retry_storms"]
    ]
    found: set[int] = set()
    false: list[dict] = []
    for window in ads(settings, "retry_storms").iter_rows(named=True):
        hits = {
            i
            for i, (tenant, start, end) in enumerate(planted)
            if tenant == window["tenant_id"] and window["window_start"] < end and window["window_end"] > start
        }
        found |= hits
        if not hits:
            false.append(window)
    return found, false


def test_every_planted_retry_storm_is_found(built: tuple[Settings, dict, Path]) -> None:
    settings, manifest, _ = built
    found, false = storms_found(settings, manifest)
    assert manifest["retry_storms"] and found == set(range(len(manifest["retry_storms"])))
    assert not false
    storms = ads(settings, "retry_storms")
    assert (storms["retries"] > storms["first_attempts"]).all() and (storms["threshold_multiple"] == 1.0).all()


@pytest.mark.slow
def test_a_week_of_retry_storms_found_with_at_most_one_false_storm(tmp_path: Path) -> None:
    settings, manifest = build_lake(
        tmp_path / "home", tmp_path / "landing", days=7, requests_per_day=STORM_SCALE, seed=11
    )
    found, false = storms_found(settings, manifest)
    assert found == set(range(len(manifest["retry_storms"]))) and len(manifest["retry_storms"]) >= 2
    # A false storm is a tenant's run of windows that overlaps no planted storm.
    assert len({(w["tenant_id"], w["event_date"]) for w in false}) <= 1


def test_quota_use_is_against_the_quota_in_effect(built: tuple[Settings, dict, Path]) -> None:
    settings, _, landing = built
    quotas = pl.read_csv(landing / "quotas.csv", try_parse_dates=True).sort("effective_from")
    tenants = ads(settings, "tenant_daily").sort("event_date")
    expected = tenants.select("event_date", "tenant_id").join_asof(
        quotas,
        left_on="event_date",
        right_on="effective_from",
        by="tenant_id",
        strategy="backward",
        check_sortedness=False,
    )
    got = tenants.join(expected, on=["event_date", "tenant_id"], suffix="_expected")
    assert got["daily_request_quota"].eq_missing(got["daily_request_quota_expected"]).all()
    assert got["daily_token_quota"].eq_missing(got["daily_token_quota_expected"]).all()
    raised = quotas.filter(pl.col("effective_from") > START)["tenant_id"].to_list()
    assert raised and got.filter(pl.col("tenant_id") == raised[0])["daily_request_quota"].n_unique() == 2
    with_quota = got.filter(pl.col("daily_request_quota").is_not_null())
    assert (with_quota["request_quota_used"] == with_quota["requests"] / with_quota["daily_request_quota"]).all()
    over = (with_quota["requests"] > with_quota["daily_request_quota"]) | (
        with_quota["total_tokens"] > with_quota["daily_token_quota"]
    )
    assert with_quota["is_over_quota"].eq(over).all() and over.any() and not over.all()
    assert not got.filter(pl.col("daily_request_quota").is_null())["is_over_quota"].any()


def test_version_mix_flags_the_gray_release_and_the_pipeline_upgrade(built: tuple[Settings, dict, Path]) -> None:
    settings, manifest, _ = built
    mix = ads(settings, "version_mix")
    days_models = [(day, model) for day, truth in manifest["days"].items() for model in truth["models"]]
    assert sorted((r["event_date"].isoformat(), r["model"]) for r in mix.iter_rows(named=True)) == sorted(days_models)
    for row in mix.iter_rows(named=True):
        truth = manifest["days"][row["event_date"].isoformat()]["models"][row["model"]]["versions"]
        assert dict(zip(row["versions"], row["version_requests"])) == truth
        assert row["is_mixed"] == (len(truth) > 1) and abs(sum(row["version_shares"]) - 1) < 1e-12
        assert row["version_requests"] == sorted(row["version_requests"], reverse=True)
    gray = mix.filter(pl.col("model") == "aurora-chat-70b")
    assert gray["is_mixed"].all()
    # Tenants move to the newer chat prompt template at their own pace; embeddings log no template.
    assert gray["is_template_mismatch"].all() and gray["template_mismatch_versions"].to_list()[0] == ["v3.1", "v3.2"]
    assert not mix.filter(pl.col("model") == "text-embedding-3-small")["is_template_mismatch"].any()
    # The triton fleet upgrades its pipeline at noon of the second day: only then do versions disagree.
    reranker = mix.filter(pl.col("model") == "bge-reranker-v2").sort("event_date")
    assert reranker["is_pipeline_mismatch"].to_list() == [False, True]
    assert reranker["pipeline_mismatch_versions"].to_list()[1] == ["v2.0"]


def test_data_quality_reports_the_books_the_quarantine_and_the_audits(built: tuple[Settings, dict, Path]) -> None:
    settings, _, _ = built
    quality = ads(settings, "data_quality")
    books = pl.read_delta(table("ops.books").uri(settings))
    quarantine = pl.read_delta(table("dwd.quarantine").uri(settings)).filter(pl.col("target_table") == "dwd.request")
    for day in DAYS:
        row = quality.filter((pl.col("event_date") == day) & (pl.col("table_name") == "dwd.request")).row(0, named=True)
        kept = books.filter((pl.col("event_date") == day) & (pl.col("table_name") == "dwd.request")).row(0, named=True)
        assert (row["ods_rows"], row["quarantined"], row["malformed"], row["duplicates"]) == (
            kept["ods_rows"],
            kept["quarantined"],
            kept["malformed"],
            kept["duplicates"],
        )
        assert row["status"] == "published" and row["books_balanced"] and row["rows_published"] == kept["dwd_rows"]
        rules = quarantine.filter(pl.col("event_date") == day)["rules"].explode().value_counts()
        assert dict(zip(row["quarantine_rules"], row["quarantine_rule_counts"])) == dict(rules.iter_rows())
        assert row["quarantine_rule_counts"] == sorted(row["quarantine_rule_counts"], reverse=True)
        assert row["freshness_sla_hours"] == 26 and row["is_fresh"] is False  # built long after 2026-03
    # Each day's books once: a late-label rewrite of several days is a row of its own, without them.
    per_day = (
        quality.filter(pl.col("table_name") == "dwd.request")
        .group_by("event_date")
        .agg(pl.col("quarantined").sum(), pl.col("ods_rows").sum())
    )
    kept = books.filter(pl.col("table_name") == "dwd.request").select("event_date", "quarantined", "ods_rows")
    assert per_day.sort("event_date").equals(kept.sort("event_date"))
    assert set(quality["table_name"]) >= {"dwd.request", "dwd.feedback", "dwd.quarantine", "ops.books"}


def test_every_ads_table_reads_with_polars_and_deltalake(built: tuple[Settings, dict, Path]) -> None:
    from deltalake import DeltaTable

    from contracts import arrow_schema

    settings, manifest, _ = built
    for mart in MARTS:
        scanned = pl.scan_delta(mart.uri(settings)).collect()
        delta = DeltaTable(mart.uri(settings)).to_pyarrow_table()
        assert scanned.height == delta.num_rows
        assert delta.schema.names == arrow_schema(mart.contract).names
        assert set(scanned["event_date"]) <= set(DAYS)
    assert (
        pl.scan_delta(ADS_MODEL_DAILY.uri(settings)).select(pl.col("requests").sum()).collect().item()
        == sum(m["requests"] for day in manifest["days"].values() for m in day["models"].values())
        > 2 * STORM_SCALE  # the days' traffic and their workflows' model calls
    )


def test_a_rebuild_replaces_exactly_its_day(
    built: tuple[Settings, dict, Path], caplog: pytest.LogCaptureFixture
) -> None:
    settings, _, _ = built
    before = {m.name: ads(settings, m.name.split(".")[1]) for m in MARTS}
    versions = {m.name: Lake(settings).version(m) for m in MARTS}
    with caplog.at_level(logging.INFO, logger="strata"):
        result = pipeline.build_ads(settings, DAYS[1])
    assert result.versions == {name: v + 1 for name, v in versions.items()}
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("strata.")]  # a task's log, as it runs
    assert f"build_ads {DAYS[1]}: started" in logged and any(
        m.startswith(f"build_ads {DAYS[1]}: dbt build ") for m in logged
    )
    assert any(m.startswith(f"build_ads {DAYS[1]}: done in ") and "model_daily_rows=" in m for m in logged)
    # data_quality lists the first build's writes of both days (a row per day they name) on the rebuilt day.
    quality = ads(settings, "data_quality").filter(pl.col("event_date") == DAYS[1])
    both = ", ".join(f"event_date = '{day}'" for day in DAYS)
    assert {m.name for m in MARTS} <= set(quality.filter(pl.col("partition") == both)["table_name"])
    for mart in MARTS[:-1]:  # data_quality now lists the ADS tables' own writes as well
        after = ads(settings, mart.name.split(".")[1])
        key = list(mart.contract.primary_key)
        assert after.sort(key).equals(before[mart.name].sort(key)), mart.name


def test_late_labels_reach_the_marts_of_earlier_days_in_the_next_daily_build(tmp_path: Path) -> None:
    settings = load_settings(
        {"STRATA_HOME": str(tmp_path / "home"), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"}
    )
    landing = tmp_path / "landing"
    generate(landing, days=2, requests_per_day=400, seed=5, start=START, fault_rate=0.0)
    pipeline.load_prices(settings, landing / "prices.csv")

    def labelled(day: dt.date) -> tuple[int, int]:
        in_dwd = dwd_requests(settings).filter(pl.col("event_date") == day)["feedback_kind"].is_not_null().sum()
        in_ads = ads(settings, "model_daily").filter(pl.col("event_date") == day)["labelled_requests"].sum()
        return in_dwd, in_ads

    first, second = DAYS
    for day in DAYS:  # each day's files arrive, then its DWD and ADS are built
        pipeline.land(settings, [landing / kind / f"date={day}" for kind in ("requests", "feedback")])
        pipeline.build_dwd(settings, day)
        result = pipeline.build_ads(settings, day)
        if day == first:
            assert result.counts["days_caught_up"] == 0 and labelled(first)[0] == labelled(first)[1]
            before = labelled(first)
    # The second day's feedback labelled requests of the first, in DWD and, caught up, in ADS.
    assert result.counts["days_caught_up"] == 1 and labelled(first)[0] > before[0]
    assert labelled(first)[0] == labelled(first)[1] and labelled(second)[0] == labelled(second)[1]
    assert pipeline.build_ads(settings, second).counts["days_caught_up"] == 0  # a rerun: nothing changed


def test_a_model_of_the_wrong_type_fails_the_build_and_publishes_nothing(
    built: tuple[Settings, dict, Path], tmp_path: Path
) -> None:
    settings, _, _ = built
    project = tmp_path / "ads"
    shutil.copytree(PROJECT_DIR, project, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    sql = project / "models" / "marts" / "tenant_daily.sql"
    sql.write_text(
        sql.read_text().replace(
            "tenant_totals.models_used,", "cast(tenant_totals.models_used as varchar) as models_used,"
        )
    )
    versions = {m.name: Lake(settings).version(m) for m in MARTS}
    with pytest.raises(DbtFailed) as failed:
        build(Lake(settings), DAYS[:1], project_dir=project)
    message = str(failed.value)
    assert "model tenant_daily" in message and "enforced contract" in message
    assert "models_used" in message and "VARCHAR" in message and "BIGINT" in message
    assert {m.name: Lake(settings).version(m) for m in MARTS} == versions


def test_docs_generate_one_static_page_under_strata_home(built: tuple[Settings, dict, Path]) -> None:
    settings, _, _ = built
    heard: list[tuple[str, int, int]] = []
    page = pipeline.generate_docs(settings, progress=lambda *call: heard.append(call)).detail
    assert page == settings.home / "ads" / "docs" / "index.html"
    # `strata docs` shows its steps from the start: dbt's start, each model created empty, the catalog
    assert heard[0] == ("dbt run --empty", 0, 1) and heard[-2:] == [
        ("dbt docs generate", 0, 1),
        ("dbt docs generate", 1, 1),
    ]
    assert any(what == "dbt run" and done == total > 0 for what, done, total in heard)  # every model
    text = page.read_text()
    for mart in MARTS:
        assert f"model.strata_ads.{mart.name.split('.')[1]}" in text
    manifest = json.loads((page.parent / "manifest.json").read_text())
    tenants = manifest["nodes"]["model.strata_ads.tenant_daily"]
    assert tenants["description"].endswith("Grain: one row per event_date × tenant_id.")
    assert tenants["columns"]["cost_usd"]["data_type"] == "DECIMAL(18,9)"
    catalog = json.loads((page.parent / "catalog.json").read_text())  # the database's own types
    assert catalog["nodes"]["model.strata_ads.tenant_daily"]["columns"]["cost_usd"]["type"] == "DECIMAL(18,9)"
    assert not list((settings.home / "ads" / "runs").glob("docs-*"))  # a successful run leaves no folder behind
    for generated in ("target", "logs", "dbt_packages", ".user.yml"):
        assert not (PROJECT_DIR / generated).exists()  # nothing of dbt's in the source tree


def test_a_day_dwd_never_built_is_refused(built: tuple[Settings, dict, Path]) -> None:
    settings, _, _ = built
    with pytest.raises(NoData, match="DWD was never built for 2026-04-01"):
        build(Lake(settings), [dt.date(2026, 4, 1)])
