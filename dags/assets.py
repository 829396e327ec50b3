"""The assets Strata's DAGs write, one constant each: lineage in the UI, and something to listen to.

A table's asset is named as in the table registry (``layer.name``, its contract's name), so
the graph in Airflow reads like the lake. The Feast online store and the model registry
are assets too: tasks write them, other DAGs may listen. Assets here are lineage only —
Strata's own DAGs run on periodic data-interval timetables, never on asset triggers (an
asset-triggered run has no data interval and cannot be backfilled).
"""

from __future__ import annotations

from airflow.sdk import Asset


def _table(name: str) -> Asset:
    layer, short = name.split(".", 1)
    return Asset(name=name, uri=f"strata://lake/{layer}/{short}", group=layer)


# ODS and the ledger: strata_ingest
ODS_REQUESTS = _table("ods.request_log_raw")
ODS_FEEDBACK = _table("ods.feedback_raw")
OPS_LANDED_FILES = _table("ops.landed_files")

# DWD: strata_daily / dwd
DWD_MODEL_PRICE = _table("dwd.model_price")
DWD_TENANT_QUOTA = _table("dwd.tenant_quota")
DWD_REQUEST = _table("dwd.request")
DWD_FEEDBACK = _table("dwd.feedback")
DWD_SPAN = _table("dwd.span")
DWD_QUARANTINE = _table("dwd.quarantine")
OPS_BOOKS = _table("ops.books")

# DWS and features: strata_daily / dws, features
DWS_USER = _table("dws.user_features")
DWS_TENANT = _table("dws.tenant_features")
DWS_MODEL = _table("dws.model_features")
ONLINE_FEATURES = Asset(name="features.online_store", uri="strata://features/online_store", group="features")
ADS_FEATURE_CONSISTENCY = _table("ads.feature_consistency")

# ADS: strata_daily / ads (dbt marts)
ADS_MARTS = [
    _table(f"ads.{mart}")
    for mart in (
        "model_daily",
        "tenant_daily",
        "latency_breakdown",
        "retry_storms",
        "version_mix",
        "capacity",
        "cold_starts",
        "server_drift",
        "token_anomalies",
        "retry_policy",
        "trace_breakdown",
        "data_quality",
    )
]

# Models and scores: strata_train, strata_daily / scores
USER_RISK_MODEL = Asset(name="models.user_risk", uri="strata://models/user_risk", group="models")
ADS_USER_RISK_SCORES = _table("ads.user_risk_scores")
ADS_SCORE_DAILY = _table("ads.score_daily")

# The report of the week, an HTML page in the lake: strata_daily / report
REPORT = Asset(name="reports.strata_report", uri="strata://lake/reports", group="reports")
