"""The seeded population: tenants (Zipf traffic), their users (Zipf), API keys, abusers.

The population depends only on ``seed`` and the scale (``requests_per_day``), so every
day of a run draws from the same tenants and users.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthetic_workload import ids
from synthetic_workload.catalog import ABUSER_CLIENT_P, ABUSER_MODEL_SHARE, MODEL_INDEX, MODELS, NORMAL_CLIENT_P
from synthetic_workload.sampling import AliasTable

TENANT_ZIPF = 1.1
USER_ZIPF = 1.0
ABUSER_FRACTION = 0.015
#: Share of all requests sent by abusive users (a ~1.5% population sending ~6%).
ABUSE_TRAFFIC_SHARE = 0.06
#: Share of a normal tenant's requests sent by a service account (no user_id).
SERVICE_SHARE = 0.02


@dataclass(frozen=True, eq=False)
class Population:
    """Tenants, users and keys as parallel numpy arrays (index = entity number)."""

    tenant_ids: list[str]
    tenant_weights: np.ndarray  # share of normal traffic, sums to 1
    tenant_model_mix: np.ndarray  # (tenants, models) share of each model in the tenant's traffic
    tenant_cache_rate: np.ndarray  # fraction of the model's cache-hit rate the tenant gets
    tenant_limit_factor: np.ndarray  # hourly rate limit / the tenant's mean hourly volume
    tenant_new_template_p: np.ndarray  # share of the tenant's chat traffic on the newer template
    tenant_service_key: np.ndarray  # api key used by the tenant's service account
    tenant_user_start: np.ndarray  # the users of tenant t are numbered from tenant_user_start[t]
    user_ids: list[str]
    user_tenant: np.ndarray
    user_key: np.ndarray
    user_client: np.ndarray
    user_is_abuser: np.ndarray
    api_key_ids: list[str]
    abusers: np.ndarray  # user indices of abusive users
    _tenants: AliasTable
    _users: AliasTable  # a row per tenant over its users (padded); abusers weigh 0
    _abusers: AliasTable
    _models: AliasTable  # a row per tenant, then one for the abusers' model mix

    @property
    def n_tenants(self) -> int:
        return len(self.tenant_ids)

    def sample_tenants(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Tenants of ``n`` normal requests (Zipf over tenants)."""
        return self._tenants.sample(rng, 0, n).astype(np.int32)

    def sample_normal_users(self, rng: np.random.Generator, tenant: np.ndarray) -> np.ndarray:
        """A normal user of each request's tenant (Zipf within the tenant)."""
        return (self.tenant_user_start[tenant] + self._users.sample(rng, tenant, len(tenant))).astype(np.int32)

    def sample_abusers(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Abusive users of ``n`` abusive requests."""
        return self.abusers[self._abusers.sample(rng, 0, n)]

    def sample_models(self, rng: np.random.Generator, tenant: np.ndarray, abusive: np.ndarray) -> np.ndarray:
        """Model index per request: the tenant's model mix, or the abusers' mix."""
        rows = np.where(abusive, self.n_tenants, tenant)
        return self._models.sample(rng, rows, len(tenant)).astype(np.int8)


def _zipf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def population_size(requests_per_day: int) -> tuple[int, int]:
    """(tenants, users) for a scale: 20–50 tenants, about one user per 40 daily requests."""
    tenants = int(np.clip(round(6 * np.log10(max(requests_per_day, 10))) + 10, 20, 50))
    users = int(np.clip(requests_per_day // 40, 120, 60_000))
    return tenants, users


def build_population(seed: int, requests_per_day: int) -> Population:
    """Draw the population for ``seed`` at the scale of ``requests_per_day``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xB0B]))
    n_tenants, n_users = population_size(requests_per_day)
    n_models = len(MODELS)

    tenant_weights = _zipf(n_tenants, TENANT_ZIPF)[rng.permutation(n_tenants)]
    share = np.array([m.share for m in MODELS])
    share /= share.sum()
    mix = 0.5 * share + 0.5 * rng.dirichlet(share * 6 + 0.05, size=n_tenants)

    # users per tenant follow the tenant's traffic (sub-linearly), at least 3 each
    raw = tenant_weights**0.7
    per_tenant = np.maximum(3, np.floor(raw / raw.sum() * n_users)).astype(np.int64)
    n_users = int(per_tenant.sum())
    user_tenant = np.repeat(np.arange(n_tenants, dtype=np.int32), per_tenant)
    block_start = np.concatenate([[0], np.cumsum(per_tenant)[:-1]]).astype(np.int64)
    rank_in_tenant = np.arange(n_users) - block_start[user_tenant]

    # abusers: ~1.5% of users, never a tenant's top user, at least 2
    n_abusers = max(2, round(ABUSER_FRACTION * n_users))
    eligible = np.flatnonzero(rank_in_tenant > 0)
    abusers = np.sort(rng.choice(eligible, size=n_abusers, replace=False)).astype(np.int32)
    is_abuser = np.zeros(n_users, dtype=bool)
    is_abuser[abusers] = True

    # Zipf inside each tenant over its normal users (rows padded to the largest tenant)
    user_w = np.zeros((n_tenants, int(per_tenant.max())))
    user_w[user_tenant, rank_in_tenant] = np.where(is_abuser, 0.0, 1.0 / (rank_in_tenant + 1.0) ** USER_ZIPF)

    # api keys: 1–5 per tenant; users share them, the first key is the service account's
    keys_per_tenant = np.minimum(5, 1 + per_tenant // 8)
    key_start = np.concatenate([[0], np.cumsum(keys_per_tenant)[:-1]])
    user_key = (key_start[user_tenant] + rank_in_tenant % keys_per_tenant[user_tenant]).astype(np.int32)
    n_keys = int(keys_per_tenant.sum())

    client_normal = rng.choice(len(NORMAL_CLIENT_P), size=n_users, p=NORMAL_CLIENT_P)
    client_abuser = rng.choice(len(ABUSER_CLIENT_P), size=n_users, p=ABUSER_CLIENT_P)
    user_client = np.where(is_abuser, client_abuser, client_normal).astype(np.int8)

    ab_share = np.zeros(n_models)
    for name, p in ABUSER_MODEL_SHARE.items():
        ab_share[MODEL_INDEX[name]] = p

    user_hash = ids.mix64(np.arange(n_users, dtype=np.uint64), ids.seed_key(seed, ids.NS_USER))
    key_hash = ids.mix64(np.arange(n_keys, dtype=np.uint64), ids.seed_key(seed, ids.NS_KEY))
    return Population(
        tenant_ids=[f"tenant-{t + 1:03d}" for t in range(n_tenants)],
        tenant_weights=tenant_weights,
        tenant_model_mix=mix,
        tenant_cache_rate=rng.uniform(0.2, 1.0, n_tenants),
        tenant_limit_factor=rng.uniform(1.4, 3.0, n_tenants),
        tenant_new_template_p=rng.choice([0.0, 0.3, 1.0], size=n_tenants, p=[0.5, 0.3, 0.2]),
        tenant_service_key=key_start.astype(np.int32),
        tenant_user_start=block_start,
        user_ids=ids.hex_strings("u_", user_hash, 10),
        user_tenant=user_tenant,
        user_key=user_key,
        user_client=user_client,
        user_is_abuser=is_abuser,
        api_key_ids=ids.hex_strings("ak_", key_hash, 8),
        abusers=abusers,
        _tenants=AliasTable.build(tenant_weights),
        _users=AliasTable.build(user_w),
        _abusers=AliasTable.build(rng.lognormal(0.0, 0.5, n_abusers)),
        _models=AliasTable.build(np.vstack([mix, ab_share])),
    )
