"""Valid requests as numpy columns: first attempts, retries and retry storms.

Everything is drawn vectorized. :func:`plan_day` fixes a day's hourly volumes (summing
to ``requests_per_day``), its load curve and its retry storm; :func:`generate_shard` then
draws the requests of a few whole hours. First attempts follow the plan, failures grow
retry chains, and whole chains (in random order, the last one possibly cut short — a
client giving up) are kept until the shard holds exactly its planned count, so a day
holds exactly ``requests_per_day`` distinct valid requests, retries included.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from synthetic_workload import ids
from synthetic_workload.catalog import (
    ERR_INVALID,
    ERR_NONE,
    ERR_OOM,
    ERR_RATE,
    ERR_TIMEOUT,
    ERR_UPSTREAM,
    FAMILIES,
    MODELS,
    PIPELINES,
    SERVER_OFFSET,
    TEMPLATES,
    VERSION_OFFSET,
    version_weights,
)
from synthetic_workload.population import ABUSE_TRAFFIC_SHARE, SERVICE_SHARE, Population
from synthetic_workload.sampling import AliasTable
from synthetic_workload.traffic import (
    HOUR_US,
    MAX_ATTEMPTS,
    MINUTE_US,
    NON_RETRYABLE_INVALID_RATE,
    PEAK_MINUTES,
    PEAK_SURROUNDING_MINUTES,
    TOKEN_JUMP_FACTOR,
    WARMUP_REQUESTS,
    Fleet,
    RunPlan,
    Storm,
    TenantDay,
    abuse_weights,
    diurnal_weights,
    storm_for_day,
)

FINISH_STOP, FINISH_LENGTH, FINISH_FILTER = 0, 1, 2
#: HTTP status per error code (upstream errors are 502 or 503).
STATUS_OF_ERR = np.array([200, 400, 429, 500, 504, 502], dtype=np.int16)


def _param(name: str) -> np.ndarray:
    return np.array([float(getattr(m, name)) for m in MODELS])


_IN_MED, _IN_SIG = _param("in_median"), _param("in_sigma")
_OUT_MED, _OUT_SIG = _param("out_median"), _param("out_sigma")
_CTX, _MAX_OUT = _param("context"), _param("max_output")
_PREFILL, _DECODE, _BASE = _param("prefill_us_per_token"), _param("decode_us_per_token"), _param("base_inference_ms")
_PRE, _POST, _QUEUE = _param("pre_ms"), _param("post_ms"), _param("queue_ms")
_TIMEOUT, _UPSTREAM, _CACHE = _param("timeout_ms"), _param("upstream_error_rate"), _param("cache_rate")
_GEN = np.array([m.generative for m in MODELS])
_OOM = np.array([m.oom_prone for m in MODELS])
_CHAT = np.array([m.operation == "chat" for m in MODELS])
_EMB = np.array([m.operation == "embeddings" for m in MODELS])
_FAMILY_OF_MODEL = AliasTable.build(np.array([[dict(m.families).get(f.name, 0.0) for f in FAMILIES] for m in MODELS]))


def _new_version_share(day_index: int, days: int) -> np.ndarray:
    """Per model, the share of the day's traffic on its newer version (0 when it has one)."""
    return np.array([version_weights(m, day_index, days)[-1] if len(m.versions) == 2 else 0.0 for m in MODELS])


_MODEL_TEMPLATE = np.array([TEMPLATES.index(m.templates[0]) if m.templates else -1 for m in MODELS], dtype=np.int8)
_MODEL_TWO_TEMPLATES = np.array([len(m.templates) == 2 for m in MODELS])
_FAM_STAGES = np.array([f.logs_stages for f in FAMILIES])
_FAM_BATCH = np.array([f.batching for f in FAMILIES])
_FAM_QUANTUM = np.array([f.ts_quantum_us for f in FAMILIES], dtype=np.int64)
_FAM_PIPE = np.array(
    [
        [PIPELINES.index(f.pipeline_versions[0]), PIPELINES.index(f.pipeline_versions[-1])]
        if f.pipeline_versions
        else [-1, -1]
        for f in FAMILIES
    ],
    dtype=np.int8,
)


def epoch_us(day: dt.date) -> int:
    """Microseconds since the epoch of ``day``'s UTC midnight."""
    return (day - dt.date(1970, 1, 1)).days * 86_400_000_000


@dataclass(frozen=True)
class DayPlan:
    """Day-level decisions shared by the day's shards: hourly volumes, load, the retry storm,
    and the run's planted patterns (``run``).

    A day is generated in shards of whole hours (so the work pipelines); a shard holds
    exactly the planned number of valid requests of its hours.
    """

    seed: int
    day_index: int
    days: int
    date: dt.date
    requests: int
    day_start_us: int
    normal_hour_counts: np.ndarray  # (24,) first-attempt candidates of normal users
    abuse_hour_counts: np.ndarray  # (24,) ... of abusive users
    load: np.ndarray  # (24,) hourly volume / mean hourly volume
    storm: Storm | None
    pipeline_upgrade_us: int
    shard_hours: tuple[tuple[int, int], ...]  # [start, end) hours of each shard
    run: RunPlan

    def planted(self, which: TenantDay | None) -> TenantDay | None:
        """``which`` if it is planted on this day."""
        return which if which is not None and which.day == self.day_index else None

    def shard_requests(self, shard: int) -> int:
        h0, h1 = self.shard_hours[shard]
        return int(self.normal_hour_counts[h0:h1].sum() + self.abuse_hour_counts[h0:h1].sum())

    def shard_offset(self, shard: int) -> int:
        """Day-level row number of the shard's first row (rows are numbered in time order)."""
        return sum(self.shard_requests(s) for s in range(shard))


def plan_day(
    pop: Population,
    *,
    seed: int,
    day_index: int,
    days: int,
    date: dt.date,
    requests: int,
    pipeline_upgrade_us: int,
    run: RunPlan,
    hours_per_shard: int = 3,
) -> DayPlan:
    """Draw the day's hourly volumes (summing to ``requests``) and its retry storm."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1, day_index]))
    day_start = epoch_us(date)
    n_ab = int(rng.binomial(requests, ABUSE_TRAFFIC_SHARE))
    normal = rng.multinomial(requests - n_ab, diurnal_weights(rng))
    abuse = rng.multinomial(n_ab, abuse_weights())
    load = (normal + abuse) / max(requests / 24, 1e-9)
    storm = storm_for_day(rng, pop, day_index, day_start)
    shards = tuple((h, min(h + hours_per_shard, 24)) for h in range(0, 24, hours_per_shard))
    return DayPlan(
        seed, day_index, days, date, requests, day_start, normal, abuse, load, storm, pipeline_upgrade_us, shards, run
    )


@dataclass
class DayRequests:
    """The valid requests of one shard (whole hours) of a UTC day, sorted by ``ts_us``.

    Columns are numpy arrays. Codes index :mod:`synthetic_workload.catalog` tables; -1
    means "absent" (the key is omitted from the JSON line). Latencies are integer µs.
    ``retry_of`` is a row number within this shard (retries never cross a shard);
    ``instance`` indexes ``fleet``.
    """

    date: dt.date
    hours: tuple[int, int]
    row_offset: int  # day-level row number of row 0
    ts_us: np.ndarray
    hour: np.ndarray
    rid: np.ndarray  # uint64
    trace_hi: np.ndarray
    trace_lo: np.ndarray
    retry_of: np.ndarray
    attempt: np.ndarray
    tenant: np.ndarray
    user: np.ndarray
    key: np.ndarray
    model: np.ndarray
    version: np.ndarray
    family: np.ndarray
    server: np.ndarray
    instance: np.ndarray
    fleet: Fleet
    template: np.ndarray
    pipeline: np.ndarray
    client: np.ndarray
    in_tok: np.ndarray
    out_tok: np.ndarray
    cached_tok: np.ndarray
    cache_hit: np.ndarray
    batch: np.ndarray
    status: np.ndarray
    err: np.ndarray
    finish: np.ndarray
    duration_us: np.ndarray
    ttft_us: np.ndarray
    queue_us: np.ndarray
    pre_us: np.ndarray
    inf_us: np.ndarray
    post_us: np.ndarray
    abusive: np.ndarray

    def __len__(self) -> int:
        return len(self.ts_us)


def generate_shard(pop: Population, plan: DayPlan, shard: int) -> DayRequests:
    """Draw the valid requests of one shard of ``plan`` (deterministic in seed, day, shard).

    The steps draw from one generator in a fixed order: the order of the calls is part of the output.
    """
    rng = np.random.default_rng(np.random.SeedSequence([plan.seed, 2, plan.day_index, shard]))
    cand = _draw_candidates(rng, pop, plan, shard)
    tokens = _draw_tokens(rng, pop, plan, cand)
    loops = _unbounded_chains(plan, shard, cand)
    first_err = _draw_first_errors(rng, pop, plan, cand, tokens, loops[0])
    chains = _grow_retry_chains(rng, plan, cand, first_err, loops)
    rows = _attempt_rows(rng, plan, cand, tokens, chains)
    latency = _draw_latency(rng, rows)
    backoff_us = _draw_backoff(rng, chains, rows)
    slow = _Slowdowns(plan, shard, cand, chains, rows, latency)
    ts = _attempt_timestamps(cand, chains, rows, slow.apply(latency, slow.drift_rows, slow.no_rows), backoff_us)
    sel = _keep_whole_chains(rng, plan, shard, chains, ts)
    instance, ts = slow.settle(cand, chains, rows, latency, backoff_us, ts, sel)
    sel = sel[np.argsort(ts[sel], kind="stable")]  # rows are in (chain, attempt) order: a stable sort is cheap
    return _shard_requests(plan, shard, cand, chains, rows, latency, ts, sel, instance)


@dataclass(frozen=True)
class _Candidates:
    """First-attempt candidates of a shard (one per retry chain): when, who, what.

    Normal users' candidates come first, then the abusers' (``n_norm`` of the former).
    """

    n_norm: int
    hour: np.ndarray
    abusive: np.ndarray
    ts0: np.ndarray
    tenant: np.ndarray
    user: np.ndarray
    key: np.ndarray
    client: np.ndarray
    model: np.ndarray
    in_storm: np.ndarray
    version: np.ndarray
    family: np.ndarray
    template: np.ndarray

    def __len__(self) -> int:
        return len(self.ts0)


def _draw_candidates(rng: np.random.Generator, pop: Population, plan: DayPlan, shard: int) -> _Candidates:
    """The shard's first-attempt candidates, as many as the plan holds requests in its hours."""
    h0, h1 = plan.shard_hours[shard]
    m = plan.shard_requests(shard)
    storm = plan.storm
    hours = np.arange(h0, h1, dtype=np.int64)
    n_norm = int(plan.normal_hour_counts[h0:h1].sum())
    n_ab = m - n_norm
    hour = np.concatenate(
        [np.repeat(hours, plan.normal_hour_counts[h0:h1]), np.repeat(hours, plan.abuse_hour_counts[h0:h1])]
    )
    abusive = np.zeros(m, dtype=bool)
    abusive[n_norm:] = True
    # sorted within each block (values only: no other column depends on the order yet)
    ts0 = plan.day_start_us + hour * HOUR_US + rng.integers(0, HOUR_US, m)
    ts0[:n_norm].sort()
    ts0[n_norm:].sort()
    tenant = np.empty(m, dtype=np.int32)
    user = np.empty(m, dtype=np.int32)
    tn = pop.sample_tenants(rng, n_norm)
    un = pop.sample_normal_users(rng, tn)
    un[rng.random(n_norm) < SERVICE_SHARE] = -1
    ua = pop.sample_abusers(rng, n_ab)
    tenant[:n_norm], user[:n_norm] = tn, un
    tenant[n_norm:], user[n_norm:] = pop.user_tenant[ua], ua
    key = np.where(user >= 0, pop.user_key[np.maximum(user, 0)], pop.tenant_service_key[tenant]).astype(np.int32)
    client = np.where(user >= 0, pop.user_client[np.maximum(user, 0)], 0).astype(np.int8)
    model = pop.sample_models(rng, tenant, abusive)
    moved = _move_into_peak(rng, plan, shard, ts0, model, n_norm)
    if moved is not None:
        hour[:n_norm] = (ts0[:n_norm] - plan.day_start_us) // HOUR_US
        order = np.argsort(ts0[:n_norm], kind="stable")
        for col in (hour, ts0, tenant, user, key, client, model):
            col[:n_norm] = col[:n_norm][order]
    in_storm = np.zeros(m, dtype=bool)
    if storm is not None:
        in_storm = (tenant == storm.tenant) & (ts0 >= storm.start_us) & (ts0 < storm.end_us)

    new_share = _new_version_share(plan.day_index, plan.days)
    version = (VERSION_OFFSET[model] + (rng.random(m) < new_share[model])).astype(np.int16)
    family = _FAMILY_OF_MODEL.sample(rng, model, m).astype(np.int8)
    newer = _MODEL_TWO_TEMPLATES[model] & (rng.random(m) < pop.tenant_new_template_p[tenant])
    template = np.where(_MODEL_TEMPLATE[model] >= 0, _MODEL_TEMPLATE[model] + newer, -1).astype(np.int8)
    return _Candidates(
        n_norm, hour, abusive, ts0, tenant, user, key, client, model, in_storm, version, family, template
    )


def _move_into_peak(
    rng: np.random.Generator, plan: DayPlan, shard: int, ts0: np.ndarray, model: np.ndarray, n_norm: int
) -> np.ndarray | None:
    """Move first attempts of the day's peak model from the rest of the shard into its peak window.

    Returns the candidates moved (None outside the peak's shard); the block is no longer sorted.
    """
    peak = plan.run.peaks[plan.day_index]
    h0, h1 = plan.shard_hours[shard]
    if not plan.day_start_us + h0 * HOUR_US <= peak.start_us < plan.day_start_us + h1 * HOUR_US:
        return None
    end, around = peak.start_us + PEAK_MINUTES * MINUTE_US, PEAK_SURROUNDING_MINUTES * MINUTE_US
    of_model = model == peak.model
    inside = of_model & (ts0 >= peak.start_us) & (ts0 < end)
    near = of_model & (ts0 >= peak.start_us - around) & (ts0 < end + around)
    donors = np.flatnonzero(of_model[:n_norm] & ~near[:n_norm])  # normal users'; the surrounding rate stays
    rate_around = int((near & ~inside).sum()) / (2 * PEAK_SURROUNDING_MINUTES)
    # fill each minute of the window up to the target, so every one of them stands out
    minute = (ts0[inside] - peak.start_us) // MINUTE_US
    short = np.maximum(round(peak.multiplier * rate_around) - np.bincount(minute, minlength=PEAK_MINUTES), 0)
    short = short[: np.searchsorted(np.cumsum(short), donors.size, side="right")]
    moved = np.sort(rng.choice(donors, int(short.sum()), replace=False))
    ts0[moved] = (
        peak.start_us + np.repeat(np.arange(short.size), short) * MINUTE_US + rng.integers(0, MINUTE_US, moved.size)
    )
    return moved


@dataclass(frozen=True)
class _Tokens:
    """Token shapes of each candidate, shared by its retries."""

    in_tok: np.ndarray
    out: np.ndarray
    finish: np.ndarray
    cache_hit: np.ndarray
    cached: np.ndarray


def _draw_tokens(rng: np.random.Generator, pop: Population, plan: DayPlan, cand: _Candidates) -> _Tokens:
    """Prompt and answer lengths, finish reasons and prompt-cache hits of each candidate."""
    m, n_norm, model, abusive = len(cand), cand.n_norm, cand.model, cand.abusive
    ctx = _CTX[model]
    lin = np.log(_IN_MED[model]) + _IN_SIG[model] * rng.standard_normal(m)
    lin[n_norm:] += np.log(8.0) + 0.5 * rng.standard_normal(m - n_norm)  # abusers: huge prompts
    jump = plan.planted(plan.run.token_jump)
    if jump is not None:  # a prompt template stuffed with context
        lin[cand.tenant == jump.tenant] += np.log(TOKEN_JUMP_FACTOR)
    in_tok = np.maximum(1, np.minimum(np.exp(lin), np.where(abusive, 1.3 * ctx, ctx))).astype(np.int64)
    has_out = _OUT_MED[model] > 0
    out = np.exp(np.log(np.maximum(_OUT_MED[model], 1)) + _OUT_SIG[model] * rng.standard_normal(m))
    out = np.where(abusive, rng.integers(1, 21, m), out)  # ... and tiny answers
    finish = np.where(out > _MAX_OUT[model], FINISH_LENGTH, FINISH_STOP).astype(np.int8)
    out = np.where(has_out, np.clip(out, 1, _MAX_OUT[model]), 0).astype(np.int64)
    filtered = rng.random(m) < np.where(abusive, 0.05, 0.002)
    finish[filtered & _GEN[model]] = FINISH_FILTER
    out = np.where(filtered & _GEN[model], np.minimum(out, rng.integers(1, 30, m)), out)
    cache_p = _CACHE[model] * pop.tenant_cache_rate[cand.tenant] * np.where(abusive, 0.1, 1.0)
    cache_hit = rng.random(m) < cache_p
    part = np.maximum(1, (in_tok * rng.uniform(0.3, 0.95, m)).astype(np.int64))
    cached = np.where(cache_hit, np.where(_EMB[model], in_tok, part), 0)
    return _Tokens(in_tok, out, finish, cache_hit, cached)


def _unbounded_chains(plan: DayPlan, shard: int, cand: _Candidates) -> tuple[np.ndarray, np.ndarray]:
    """The candidates that start the planted unbounded chains in this shard, and each chain's attempts.

    Each planned chain time takes the tenant's next request to its model within 30 minutes.
    """
    loop = plan.planted(plan.run.unbounded)
    none = np.zeros(0, dtype=np.int64)
    if loop is None:
        return none, none
    h0, h1 = plan.shard_hours[shard]
    at = plan.run.unbounded_at
    here = (at >= plan.day_start_us + h0 * HOUR_US) & (at < plan.day_start_us + h1 * HOUR_US)
    n = cand.n_norm
    mine = np.flatnonzero((cand.tenant[:n] == loop.tenant) & (cand.model[:n] == loop.model))
    pos = np.searchsorted(cand.ts0[mine], at[here])
    found = pos < mine.size
    first = mine[pos[found]]
    ok = cand.ts0[first] < at[here][found] + 30 * MINUTE_US
    return first[ok], plan.run.unbounded_attempts[here][found][ok]


def _draw_first_errors(
    rng: np.random.Generator, pop: Population, plan: DayPlan, cand: _Candidates, tokens: _Tokens, loops: np.ndarray
) -> np.ndarray:
    """Each first attempt's error code: load-driven timeouts, tenant rate limits, oversized prompts, ..."""
    m, model, tenant, hour, abusive, in_tok = len(cand), cand.model, cand.tenant, cand.hour, cand.abusive, tokens.in_tok
    ctx = _CTX[model]
    load = plan.load[hour]
    nt = pop.n_tenants
    tenant_hour = np.bincount(tenant * 24 + hour, minlength=nt * 24)
    mean_hourly = pop.tenant_weights * plan.normal_hour_counts.sum() / 24  # the tenant's expected volume
    limit = pop.tenant_limit_factor[tenant] * mean_hourly[tenant]
    p_rate = np.clip(1 - limit / tenant_hour[tenant * 24 + hour], 0, 0.6) + 0.12 * abusive
    p_invalid = np.where(in_tok > ctx, 1.0, np.where(abusive, 0.06, 0.004))
    p_oom = _OOM[model] * 0.5 * np.clip((in_tok / ctx - 0.6) / 0.4, 0, 1) ** 2
    p_timeout = np.where(_GEN[model], 0.0025, 0.0008) * load**4
    bad = plan.planted(plan.run.non_retryable)
    if bad is not None:  # a client bug: many invalid requests of one tenant to one model
        buggy = ~abusive & (tenant == bad.tenant) & (model == bad.model)
        p_invalid = np.where(buggy, np.maximum(p_invalid, NON_RETRYABLE_INVALID_RATE), p_invalid)
    p_upstream = np.where(cand.in_storm, 0.97, _UPSTREAM[model])
    err = np.zeros(m, dtype=np.int8)
    for code, p in (
        (ERR_INVALID, p_invalid),
        (ERR_RATE, p_rate),
        (ERR_OOM, p_oom),
        (ERR_TIMEOUT, p_timeout),
        (ERR_UPSTREAM, p_upstream),
    ):
        err[(err == ERR_NONE) & (rng.random(m) < p)] = code
    err[loops] = ERR_UPSTREAM
    return err


@dataclass(frozen=True)
class _Chains:
    """Attempt rows grouped by chain (= candidate), attempts in order."""

    chain: np.ndarray  # the candidate of each row
    first_row: np.ndarray  # per candidate, the row of its first attempt
    attempt: np.ndarray  # 1 for a first attempt
    err: np.ndarray  # each attempt's error code


def _grow_retry_chains(
    rng: np.random.Generator,
    plan: DayPlan,
    cand: _Candidates,
    first_err: np.ndarray,
    loops: tuple[np.ndarray, np.ndarray],
) -> _Chains:
    """Retry failed first attempts, each retry failing again (and retried) with some probability.

    A chain takes at most MAX_ATTEMPTS attempts and an invalid request is not retried, except in
    the planted violations: a tenant retrying its 400s (once or twice, failing alike) and a
    tenant's unbounded chains of 5–8 attempts (``loops``).
    """
    m, in_storm = len(first_err), cand.in_storm
    p_retry = np.array([0.0, 0.0, 0.7, 0.3, 0.5, 0.8])[first_err]
    p_retry = np.where(in_storm & (first_err != ERR_INVALID) & (first_err != ERR_NONE), 0.97, p_retry)
    fail_again = np.where(in_storm, 0.95, np.where(first_err == ERR_RATE, 0.4, 0.25))
    p_continue = np.where(in_storm, 1.0, 0.6)
    max_attempt = np.full(m, MAX_ATTEMPTS)
    bad = plan.planted(plan.run.non_retryable)
    if bad is not None:
        retried = (first_err == ERR_INVALID) & ~cand.abusive & (cand.tenant == bad.tenant) & (cand.model == bad.model)
        p_retry[retried], fail_again[retried], p_continue[retried] = 1.0, 1.0, 0.5
    loop, attempts = loops
    p_retry[loop], fail_again[loop], p_continue[loop], max_attempt[loop] = 1.0, 1.0, 1.0, attempts
    retries: list[tuple[np.ndarray, int, np.ndarray]] = []  # (chains, attempt, error) per level
    n_retries = np.zeros(m, dtype=np.int64)
    idx = np.flatnonzero(rng.random(m) < p_retry)
    a = 2
    while idx.size:
        fails = rng.random(idx.size) < fail_again[idx]
        retries.append((idx, a, np.where(fails, first_err[idx], ERR_NONE).astype(np.int8)))
        n_retries[idx] += 1
        idx = idx[fails & (rng.random(idx.size) < p_continue[idx])]
        idx = idx[a < max_attempt[idx]]
        a += 1
    length = 1 + n_retries
    first_row = np.cumsum(length) - length
    r = int(length.sum())
    chain = np.repeat(np.arange(m), length)
    attempt = (np.arange(r) - first_row[chain] + 1).astype(np.int16)
    err = np.empty(r, dtype=np.int8)
    err[first_row] = first_err
    for idx, a, e in retries:
        err[first_row[idx] + a - 1] = e
    return _Chains(chain, first_row, attempt, err)


@dataclass(frozen=True)
class _Rows:
    """Row-level columns: the request content repeats along a chain, the outcome is per attempt."""

    model: np.ndarray
    family: np.ndarray
    load: np.ndarray
    in_storm: np.ndarray
    in_tok: np.ndarray
    abusive: np.ndarray
    err: np.ndarray
    ok: np.ndarray
    out_tok: np.ndarray
    cached_tok: np.ndarray
    cache_hit: np.ndarray
    finish: np.ndarray
    server: np.ndarray
    status: np.ndarray


def _attempt_rows(
    rng: np.random.Generator, plan: DayPlan, cand: _Candidates, tokens: _Tokens, chains: _Chains
) -> _Rows:
    """Spread the candidates' content over their attempts; draw each attempt's server and HTTP status."""
    chain, err = chains.chain, chains.err
    r = len(chain)
    model_r, family_r, storm_r = cand.model[chain], cand.family[chain], cand.in_storm[chain]
    ok = err == ERR_NONE
    active = plan.run.fleet.active_servers(family_r, cand.ts0[chain])
    server = (SERVER_OFFSET[family_r] + (rng.random(r) * active).astype(np.int16)).astype(np.int16)
    status = STATUS_OF_ERR[err]
    status = np.where((err == ERR_UPSTREAM) & (storm_r | (rng.random(r) < 0.5)), 503, status).astype(np.int16)
    return _Rows(
        model=model_r,
        family=family_r,
        load=plan.load[cand.hour][chain],
        in_storm=storm_r,
        in_tok=tokens.in_tok[chain],
        abusive=cand.abusive[chain],
        err=err,
        ok=ok,
        out_tok=np.where(ok, tokens.out[chain], 0),
        cached_tok=np.where(ok, tokens.cached[chain], 0),
        cache_hit=ok & tokens.cache_hit[chain],
        finish=np.where(ok & _GEN[model_r], tokens.finish[chain], -1).astype(np.int8),
        server=server,
        status=status,
    )


def _us(ms: np.ndarray) -> np.ndarray:
    """Milliseconds as whole microseconds."""
    return np.rint(ms * 1000).astype(np.int64)


@dataclass(frozen=True)
class _Latency:
    """Per attempt, in µs: the total, the time to first token and the logged stages (-1: absent)."""

    duration_us: np.ndarray
    ttft_us: np.ndarray
    queue_us: np.ndarray
    pre_us: np.ndarray
    inf_us: np.ndarray
    post_us: np.ndarray
    batch: np.ndarray  # dynamic batch size, -1 where the family does not batch or the request was rejected


def _draw_latency(rng: np.random.Generator, rows: _Rows) -> _Latency:
    """Each attempt's latency: queue + preprocess + inference + postprocess + overhead."""
    r, model_r, err, ok, load_r = len(rows.err), rows.model, rows.err, rows.ok, rows.load
    gen = _GEN[model_r]
    queue = rng.exponential(1.0, r) * _QUEUE[model_r] * load_r**2
    pre = _PRE[model_r] * rng.lognormal(0, 0.4, r)
    lam = np.where(gen, 6.0, 12.0) * load_r  # dynamic batch size ~ Poisson(lam), normal approximation
    batch = np.rint(lam + np.sqrt(lam) * rng.standard_normal(r)).astype(np.int64)
    batch = np.where(_FAM_BATCH[rows.family], np.clip(batch, 0, 63) + 1, -1)
    prefill = np.where(
        gen, (rows.in_tok - rows.cached_tok) * _PREFILL[model_r] / 1000 * rng.lognormal(0, 0.2, r) + 5, 0
    )
    decode = rows.out_tok * _DECODE[model_r] / 1000 * rng.lognormal(0, 0.25, r) * (1 + 0.02 * np.maximum(batch, 1))
    nongen = _BASE[model_r] * (rows.in_tok / _IN_MED[model_r]) ** 0.6 * rng.lognormal(0, 0.35, r)
    nongen = np.where(_EMB[model_r] & rows.cache_hit, nongen * 0.02, nongen)
    post = _POST[model_r] * rng.lognormal(0, 0.5, r)
    over = 0.05 + 2.0 * rng.lognormal(0, 0.5, r)
    first_token = _DECODE[model_r] / 1000 * rng.lognormal(0, 0.3, r)

    rejected = (err == ERR_RATE) | (err == ERR_INVALID)
    queue[rejected] = 0
    pre = np.where(err == ERR_RATE, pre * 0.1, pre)
    post = np.where(rejected, post * 0.2, np.where(ok, post, 0))
    batch[rejected] = -1
    timeout = err == ERR_TIMEOUT
    target = _TIMEOUT[model_r] + rng.uniform(0, 20, r)
    queue = np.where(timeout, np.minimum(queue, 0.5 * target), queue)
    inf_ms = np.where(gen, prefill + decode, nongen)
    inf_ms = np.where(rejected, 0, inf_ms)
    inf_ms = np.where(err == ERR_OOM, np.where(gen, prefill, nongen) * rng.uniform(0.1, 1, r), inf_ms)
    inf_ms = np.where(timeout, np.maximum(target - queue - pre - over, 0), inf_ms)
    inf_ms = np.where(err == ERR_UPSTREAM, np.minimum(300 * rng.lognormal(0, 1, r), 0.5 * _TIMEOUT[model_r]), inf_ms)

    q_us, pre_us, post_us, over_us = _us(queue), _us(pre), _us(post), _us(over)
    prefill_us, decode_us = _us(prefill), _us(decode)
    inf_us = np.where(gen & ok, prefill_us + decode_us, _us(inf_ms))
    duration_us = q_us + pre_us + inf_us + post_us + over_us
    chat_ok = _CHAT[model_r] & ok
    ttft_us = np.where(chat_ok, q_us + pre_us + prefill_us + np.minimum(_us(first_token), decode_us), -1)
    logged = _FAM_STAGES[rows.family]
    q_us, pre_us, inf_us, post_us = (np.where(logged, x, -1) for x in (q_us, pre_us, inf_us, post_us))
    return _Latency(duration_us, ttft_us, q_us, pre_us, inf_us, post_us, batch)


def _draw_backoff(rng: np.random.Generator, chains: _Chains, rows: _Rows) -> np.ndarray:
    """Each attempt's client backoff before its retry, in µs."""
    r, err, attempt = len(chains.chain), rows.err, chains.attempt
    backoff_ms = np.where(
        rows.in_storm,
        rng.uniform(20, 400, r),
        np.where(err == ERR_RATE, rng.uniform(1000, 5000, r), 500.0 * 2.0 ** (attempt - 1) * rng.uniform(0.5, 1.5, r)),
    )
    return _us(backoff_ms)


def _attempt_timestamps(
    cand: _Candidates, chains: _Chains, rows: _Rows, duration_us: np.ndarray, backoff_us: np.ndarray
) -> np.ndarray:
    """Each attempt's start: a retry starts after the previous attempt's duration and the client's backoff."""
    inc = duration_us + backoff_us
    excl = np.cumsum(inc) - inc
    ts = cand.ts0[chains.chain] + excl - excl[chains.first_row][chains.chain]
    ts -= ts % _FAM_QUANTUM[rows.family]
    return ts


class _Slowdowns:
    """A shard's planted slowdowns: the drifting instance, and the first WARMUP_REQUESTS kept rows of
    each instance started in the shard. Both multiply duration, inference and time to first token.

    Who is slowed depends on the instance serving each attempt, that on the attempt's time, and that
    on the earlier attempts' durations: :meth:`settle` iterates to a fixed point.
    """

    def __init__(self, plan: DayPlan, shard: int, cand: _Candidates, chains: _Chains, rows: _Rows, latency: _Latency):
        fleet, drift = plan.run.fleet, plan.run.drift
        h0, h1 = plan.shard_hours[shard]
        lo, hi = plan.day_start_us + h0 * HOUR_US, plan.day_start_us + h1 * HOUR_US
        self.fleet = fleet
        self.no_rows = np.zeros(0, dtype=np.int64)
        self.instance = self.no_rows  # each row's instance, once its time is known
        self.new = np.flatnonzero((fleet.start_us >= lo) & (fleet.start_us < hi) & (fleet.warmup > 1))
        self.drift_instance = -1
        self.drift_rows = self.no_rows
        if drift is not None and drift.day == plan.day_index:
            t = cand.ts0[chains.chain]  # the chain's start: close to each attempt's
            on = (rows.server == fleet.server[drift.instance]) & (t >= drift.start_us) & (t < drift.restart_us)
            self.drift_instance, self.drift_rows = drift.instance, np.flatnonzero(on)
        self.base: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if self.new.size or self.drift_rows.size:
            self.base = (latency.duration_us.copy(), latency.inf_us.copy(), latency.ttft_us.copy())
            self.drift_factor = np.ones(len(chains.chain))
            if self.drift_rows.size and drift is not None:
                work = _planned_work(plan, cand.ts0[chains.chain[self.drift_rows]])
                w0, w1 = _planned_work(plan, np.array([drift.start_us, drift.restart_us]))
                self.drift_factor[self.drift_rows] = 1 + (drift.slowdown - 1) * (work - w0) / (w1 - w0)

    def apply(self, latency: _Latency, drift_rows: np.ndarray, warm: np.ndarray) -> np.ndarray:
        """Slow ``drift_rows`` by the drift and ``warm`` by their instance's warm-up; the durations."""
        if self.base is None:
            return latency.duration_us
        duration, inference, ttft = self.base
        factor = np.ones(len(duration))
        factor[drift_rows] = self.drift_factor[drift_rows]
        factor[warm] *= self.fleet.warmup[self.instance[warm]]
        latency.duration_us[:] = np.rint(duration * factor)
        latency.inf_us[:] = np.where(inference >= 0, np.rint(inference * factor), inference)
        latency.ttft_us[:] = np.where(ttft >= 0, np.rint(ttft * factor), ttft)
        return latency.duration_us

    def _warm(self, ts: np.ndarray, sel: np.ndarray) -> np.ndarray:
        """The kept rows among the first WARMUP_REQUESTS of each instance started in the shard."""
        rows = sel[np.isin(self.instance[sel], self.new)]
        rows = rows[np.lexsort((ts[rows], self.instance[rows]))]
        inst = self.instance[rows]
        rank = np.arange(rows.size) - np.searchsorted(inst, inst, side="left")
        return np.sort(rows[rank < WARMUP_REQUESTS])

    def settle(
        self,
        cand: _Candidates,
        chains: _Chains,
        rows: _Rows,
        latency: _Latency,
        backoff_us: np.ndarray,
        ts: np.ndarray,
        sel: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each attempt's instance and time, once the slowed rows are exactly those the rules pick."""
        self.instance = self.fleet.instance_of(rows.server, ts)
        if self.base is None:
            return self.instance, ts
        used = (self.drift_rows, self.no_rows)
        for _ in range(8):
            drift_rows = self.drift_rows[self.instance[self.drift_rows] == self.drift_instance]
            warm = self._warm(ts, sel)
            if np.array_equal(drift_rows, used[0]) and np.array_equal(warm, used[1]):
                break
            used = (drift_rows, warm)
            ts = _attempt_timestamps(cand, chains, rows, self.apply(latency, drift_rows, warm), backoff_us)
            self.instance = self.fleet.instance_of(rows.server, ts)
        return self.instance, ts


def _planned_work(plan: DayPlan, t_us: np.ndarray) -> np.ndarray:
    """The day's planned requests before each time (hourly volumes, linear within the hour)."""
    cum = np.concatenate([[0], np.cumsum(plan.normal_hour_counts + plan.abuse_hour_counts)])
    return np.interp(t_us - plan.day_start_us, np.arange(25) * HOUR_US, cum)


def _keep_whole_chains(
    rng: np.random.Generator, plan: DayPlan, shard: int, chains: _Chains, ts: np.ndarray
) -> np.ndarray:
    """The rows kept, in (chain, attempt) order: whole chains (random order) until exactly the planned count.

    The last chain kept may be cut short (a client giving up); rows past the shard's end are dropped.
    """
    m = plan.shard_requests(shard)
    chain, attempt = chains.chain, chains.attempt
    keep = ts < plan.day_start_us + plan.shard_hours[shard][1] * HOUR_US
    kept_length = np.bincount(chain[keep], minlength=m)
    perm = rng.permutation(m)
    cum = np.cumsum(kept_length[perm])
    n_full = int(np.searchsorted(cum, m, side="right"))
    rem = m - (int(cum[n_full - 1]) if n_full else 0)
    rank = np.empty(m, dtype=np.int64)
    rank[perm] = np.arange(m)
    rank_r = rank[chain]
    keep &= (rank_r < n_full) | ((rank_r == n_full) & (attempt - 1 < rem))
    sel = np.flatnonzero(keep)
    assert len(sel) == m, (len(sel), m)
    return sel


def _shard_requests(
    plan: DayPlan,
    shard: int,
    cand: _Candidates,
    chains: _Chains,
    rows: _Rows,
    latency: _Latency,
    ts: np.ndarray,
    sel: np.ndarray,
    instance: np.ndarray,
) -> DayRequests:
    """The kept rows as the shard's columns, with their ids and each retry's first attempt."""
    seed, day_index = plan.seed, plan.day_index
    m = len(sel)
    row_offset = plan.shard_offset(shard)
    chain_s, attempt_s = chains.chain[sel], chains.attempt[sel]
    first_pos = np.full(m, -1, dtype=np.int64)
    firsts = np.flatnonzero(attempt_s == 1)
    first_pos[chain_s[firsts]] = firsts
    retry_of = np.where(attempt_s > 1, first_pos[chain_s], -1)
    ts_s = ts[sel]
    fam_s = rows.family[sel]
    pipe = np.where(ts_s >= plan.pipeline_upgrade_us, _FAM_PIPE[fam_s, 1], _FAM_PIPE[fam_s, 0]).astype(np.int8)
    return DayRequests(
        date=plan.date,
        hours=plan.shard_hours[shard],
        row_offset=row_offset,
        ts_us=ts_s,
        hour=((ts_s - plan.day_start_us) // HOUR_US).astype(np.int8),
        rid=ids.structured_ids(seed, ids.NS_REQUEST, day_index, row_offset + np.arange(m)),
        trace_hi=ids.structured_ids(seed, ids.NS_TRACE, day_index, row_offset + chain_s),
        trace_lo=ids.structured_ids(seed, ids.NS_TRACE + 8, day_index, row_offset + chain_s),
        retry_of=retry_of,
        attempt=attempt_s,
        tenant=cand.tenant[chain_s],
        user=cand.user[chain_s],
        key=cand.key[chain_s],
        model=rows.model[sel],
        version=cand.version[chain_s],
        family=fam_s,
        server=rows.server[sel],
        instance=instance[sel].astype(np.int32),
        fleet=plan.run.fleet,
        template=cand.template[chain_s],
        pipeline=pipe,
        client=cand.client[chain_s],
        in_tok=rows.in_tok[sel],
        out_tok=rows.out_tok[sel],
        cached_tok=rows.cached_tok[sel],
        cache_hit=rows.cache_hit[sel],
        batch=latency.batch[sel].astype(np.int16),
        status=rows.status[sel],
        err=rows.err[sel],
        finish=rows.finish[sel],
        duration_us=latency.duration_us[sel],
        ttft_us=latency.ttft_us[sel],
        queue_us=latency.queue_us[sel],
        pre_us=latency.pre_us[sel],
        inf_us=latency.inf_us[sel],
        post_us=latency.post_us[sel],
        abusive=rows.abusive[sel],
    )
