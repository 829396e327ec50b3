"""The table registry: every table Strata writes, as its contract declares it.

A table's name, layer, partitioning and the classification of its columns come from its
contract (``contracts/tables/<layer>.<name>.yaml``, plus any folder on
``$STRATA_CONTRACTS_PATH``); its location is ``<lake root>/<layer>/<name>``, so any Delta
reader finds it without Strata. Code names tables through the constants below or
:func:`table`, never through string literals of its own, and whatever must reach every
table of a kind (erasure, retention) walks :func:`all_tables`.

Column classifications used by the walks:

* ``pii``: the user's identity in clear — a user id, or raw lines that may hold one.
  Tables with such a column are raw data: the raw-data retention applies to them.
* ``pseudonymous``: the user's keyed pseudonym (an entity key of features and scores).
* ``free_text``: text for a person that may quote row values (an audit message's examples):
  erasure redacts a user's id and pseudonym in it, the row stays.
* ``forgotten``: the pseudonym of a user erased by ``strata forget`` (the suppression list,
  ``ops.forgotten_users``): kept on purpose, so erasure and retention leave it alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import Column, Contract, all_contracts, load_contract
from warehouse.settings import Settings

PII = "pii"
PSEUDONYMOUS = "pseudonymous"
FREE_TEXT = "free_text"
FORGOTTEN = "forgotten"


@dataclass(frozen=True)
class Table:
    """One table of the lake, named ``layer.name``; everything else is read from its contract."""

    name: str

    @property
    def layer(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def contract(self) -> Contract:
        return load_contract(self.name)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.contract.partition_columns

    def uri(self, settings: Settings) -> str:
        """Where the table lives: ``<lake root>/<layer>/<name>``."""
        layer, name = self.name.split(".", 1)
        return f"{settings.lake_uri.rstrip('/')}/{layer}/{name}"

    def classified(self, classification: str) -> list[Column]:
        """The table's columns of one classification (``pii``, ``pseudonymous``)."""
        return [c for c in self.contract.columns if c.classification == classification]

    def __str__(self) -> str:
        return self.name


def table(name: str) -> Table:
    """The table called ``name``; a ``ContractError`` naming the known tables when it has no contract."""
    load_contract(name)
    return Table(name)


def all_tables() -> list[Table]:
    """Every table with a contract, shipped or added, in name order."""
    return [Table(name) for name in sorted(all_contracts())]


ODS_REQUESTS = Table("ods.request_log_raw")
ODS_FEEDBACK = Table("ods.feedback_raw")
DWD_REQUEST = Table("dwd.request")
DWD_FEEDBACK = Table("dwd.feedback")
DWD_SPAN = Table("dwd.span")
DWD_QUARANTINE = Table("dwd.quarantine")
DWD_MODEL_PRICE = Table("dwd.model_price")
OPS_AUDIT_LOG = Table("ops.audit_log")
OPS_BOOKS = Table("ops.books")
OPS_LANDED_FILES = Table("ops.landed_files")
OPS_FORGOTTEN_USERS = Table("ops.forgotten_users")
OPS_SUPPRESSED_RECORDS = Table("ops.suppressed_records")
DWD_TENANT_QUOTA = Table("dwd.tenant_quota")
DWS_USER_FEATURES = Table("dws.user_features")
DWS_TENANT_FEATURES = Table("dws.tenant_features")
DWS_MODEL_FEATURES = Table("dws.model_features")
ADS_MODEL_DAILY = Table("ads.model_daily")
ADS_TENANT_DAILY = Table("ads.tenant_daily")
ADS_LATENCY_BREAKDOWN = Table("ads.latency_breakdown")
ADS_RETRY_STORMS = Table("ads.retry_storms")
ADS_VERSION_MIX = Table("ads.version_mix")
ADS_DATA_QUALITY = Table("ads.data_quality")
ADS_CAPACITY = Table("ads.capacity")
ADS_COLD_STARTS = Table("ads.cold_starts")
ADS_SERVER_DRIFT = Table("ads.server_drift")
ADS_TOKEN_ANOMALIES = Table("ads.token_anomalies")
ADS_RETRY_POLICY = Table("ads.retry_policy")
ADS_TRACE_BREAKDOWN = Table("ads.trace_breakdown")
ADS_USER_RISK_SCORES = Table("ads.user_risk_scores")
ADS_SCORE_DAILY = Table("ads.score_daily")
