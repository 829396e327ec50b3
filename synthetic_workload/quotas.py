"""Tenant quotas: the ``quotas.csv`` reference file a generated dataset comes with.

Each tenant with a quota gets a daily request quota and a daily token quota (input +
output tokens) near its expected volume — some above it, some below, so some tenants go
over on busy days — and about a quarter of the tenants have none. The busiest tenant's
quotas are raised in the middle of the run, so the quota in effect changes over time the
way prices do. Drawn from the population and its own seeded generator only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from synthetic_workload.catalog import MODELS
from synthetic_workload.population import ABUSE_TRAFFIC_SHARE, Population

#: Share of tenants without any quota.
NO_QUOTA_SHARE = 0.25
HEADER = "tenant_id,effective_from,daily_request_quota,daily_token_quota"


@dataclass(frozen=True)
class QuotaRow:
    tenant_id: str
    effective_from: dt.date
    daily_request_quota: int
    daily_token_quota: int


def _mean_tokens_per_request() -> np.ndarray:
    """Per model, the mean input + output tokens of its (log-normal) request shapes."""
    return np.array(
        [m.in_median * np.exp(m.in_sigma**2 / 2) + m.out_median * np.exp(m.out_sigma**2 / 2) for m in MODELS]
    )


def quota_rows(pop: Population, *, seed: int, requests_per_day: int, start: dt.date, days: int) -> list[QuotaRow]:
    """The quota history: a row per tenant with a quota from 30 days before ``start``, and a
    raise of the busiest tenant's quotas on the middle day of the run (runs of 2+ days)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9407A]))
    expected = pop.tenant_weights * requests_per_day * (1 - ABUSE_TRAFFIC_SHARE)
    tokens = expected * (pop.tenant_model_mix @ _mean_tokens_per_request())
    request_factor = rng.uniform(0.9, 2.0, pop.n_tenants)
    token_factor = rng.uniform(0.9, 2.0, pop.n_tenants)
    has_quota = rng.random(pop.n_tenants) >= NO_QUOTA_SHARE
    busiest = int(np.argmax(pop.tenant_weights))
    has_quota[busiest] = True
    rows = []
    for t in np.flatnonzero(has_quota).tolist():
        req = max(100, int(round(expected[t] * request_factor[t], -2)))
        tok = max(10_000, int(round(tokens[t] * token_factor[t], -4)))
        rows.append(QuotaRow(pop.tenant_ids[t], start - dt.timedelta(days=30), req, tok))
        if t == busiest and days > 1:
            rows.append(QuotaRow(pop.tenant_ids[t], start + dt.timedelta(days=days // 2), req * 3 // 2, tok * 3 // 2))
    return sorted(rows, key=lambda r: (r.tenant_id, r.effective_from))


def quotas_csv(rows: list[QuotaRow]) -> bytes:
    """The ``quotas.csv`` file: header + one row per quota period."""
    lines = [HEADER] + [
        f"{r.tenant_id},{r.effective_from.isoformat()},{r.daily_request_quota},{r.daily_token_quota}" for r in rows
    ]
    return ("\n".join(lines) + "\n").encode()
