"""Columns → canonical JSON lines, vectorized with polars string expressions.

No per-line ``json.dumps``: a line is the concatenation of a few text pieces — fixed-width
ASCII blocks built in numpy (ids), numbers cast to text, and large lookup tables of
pre-rendered key/value runs gathered by a combined code (who, service, outcome).
Optional keys are null pieces that ``concat_str(ignore_nulls=True)`` skips. The select
runs on polars' streaming engine, which spreads the work over all cores. All values are
ASCII and need no JSON escaping.
"""

from __future__ import annotations

import functools

import numpy as np
import polars as pl

from synthetic_workload import ids
from synthetic_workload.catalog import (
    CLIENTS,
    ERROR_TYPES,
    FAMILIES,
    FINISH_REASONS,
    MODELS,
    PIPELINES,
    SERVERS,
    TEMPLATES,
    VERSIONS,
)
from synthetic_workload.population import Population
from synthetic_workload.requests import DayRequests
from synthetic_workload.traffic import Fleet

#: Status codes that occur, and the error_type each implies ("" for success).
STATUSES: tuple[int, ...] = (200, 400, 429, 500, 502, 503, 504)
STATUS_ERROR: dict[int, str] = {
    200: "",
    400: "invalid_request",
    429: "rate_limited",
    500: "oom",
    502: "upstream_error",
    503: "upstream_error",
    504: "timeout",
}
assert set(STATUS_ERROR.values()) - {""} == set(ERROR_TYPES)
_STATUS_INDEX = np.zeros(600, dtype=np.int64)
_STATUS_INDEX[list(STATUSES)] = np.arange(len(STATUSES))

_FAM_OFFSET_US = np.array([f.utc_offset_minutes * 60_000_000 for f in FAMILIES], dtype=np.int64)
_FAM_EPOCH = np.array([f.ts_format == "epoch_ms" for f in FAMILIES])
_FAM_TS_LEN = np.array([20 + f.fraction_digits for f in FAMILIES], dtype=np.int64)  # "YYYY-MM-DDTHH:MM:SS.f…"
_NT, _NP = len(TEMPLATES) + 1, len(PIPELINES) + 1


def offset_text(minutes: int) -> str:
    """RFC 3339 offset: ``Z`` or ``±HH:MM``."""
    if minutes == 0:
        return "Z"
    sign = "+" if minutes > 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@functools.lru_cache(maxsize=4)
def _service_table(fleet: Fleet) -> pl.Series:
    """``,"operation":…,"input_tokens":`` per (version, server instance, template, pipeline) code."""
    service = []
    for m, v in VERSIONS:
        spec = MODELS[m]
        model_part = (
            f',"operation":"{spec.operation}","model":"{spec.name}","model_version":"{v}","provider":"{spec.provider}"'
        )
        for server, instance in zip(fleet.server.tolist(), fleet.names):
            for t in (None, *TEMPLATES):
                for p in (None, *PIPELINES):
                    service.append(
                        model_part
                        + f',"server":"{SERVERS[server][1]}","server_instance":"{instance}"'
                        + (f',"prompt_template_version":"{t}"' if t else "")
                        + (f',"pipeline_version":"{p}"' if p else "")
                        + ',"input_tokens":'
                    )
    return pl.Series(service)


@functools.lru_cache(maxsize=1)
def _static_tables() -> dict[str, pl.Series]:
    """Pre-rendered runs of keys for the catalog codes."""
    tail = []
    for status in STATUSES:
        err = STATUS_ERROR[status]
        for finish in (None, *FINISH_REASONS):
            for hit in ("false", "true"):
                for f in FAMILIES:
                    for c in CLIENTS:
                        tail.append(
                            f',"status_code":{status}'
                            + (f',"error_type":"{err}"' if err else "")
                            + (f',"finish_reason":"{finish}"' if finish else "")
                            + f',"cache_hit":{hit},"attributes":{{"region":"{f.region}","client":"{c}"}}}}\n'
                        )
    return {
        "tail": pl.Series(tail),
        "ts_suffix": pl.Series([offset_text(f.utc_offset_minutes) + '"' for f in FAMILIES]),
    }


@functools.lru_cache(maxsize=4)
def _who_table(pop: Population) -> pl.Series:
    """``,"tenant_id":…,"user_id":…,"api_key_id":…`` per user, then one per tenant's service account."""
    rows = [
        f',"tenant_id":"{pop.tenant_ids[t]}","user_id":"{u}","api_key_id":"{pop.api_key_ids[k]}"'
        for u, t, k in zip(pop.user_ids, pop.user_tenant.tolist(), pop.user_key.tolist())
    ]
    rows += [
        f',"tenant_id":"{t}","api_key_id":"{pop.api_key_ids[k]}"'
        for t, k in zip(pop.tenant_ids, pop.tenant_service_key.tolist())
    ]
    return pl.Series(rows)


def _ascii_block(n: int, *parts: bytes | np.ndarray) -> np.ndarray:
    """Concatenate fixed-width parts (literal bytes or (n, w) uint8 arrays) into an (n, W) block."""
    widths = [len(p) if isinstance(p, bytes) else p.shape[1] for p in parts]
    out = np.empty((n, sum(widths)), dtype=np.uint8)
    col = 0
    for p, w in zip(parts, widths):
        out[:, col : col + w] = np.frombuffer(p, np.uint8) if isinstance(p, bytes) else p
        col += w
    return out


def _ms(values_us: np.ndarray) -> np.ndarray:
    """Milliseconds as float64 (true division: casts to the shortest exact text, e.g. 0.701)."""
    return values_us / 1000.0


def encode_requests(pop: Population, d: DayRequests, src: np.ndarray, rid: np.ndarray, plain: np.ndarray) -> pl.Series:
    """JSON lines (each ending in ``\\n``) for rows ``src`` of ``d`` with request ids ``rid``.

    Rows where ``plain`` is False (fault templates) are written as first attempts without
    ``retry_of``, so a fault line never points at a real request.
    """
    df = _line_parts(pop, d, src, _heads(d, src, rid, plain), _retry_ofs(d, src, plain))
    return df.lazy().select(_line().alias("line")).collect(engine="streaming")["line"]


def _heads(d: DayRequests, src: np.ndarray, rid: np.ndarray, plain: np.ndarray) -> pl.Series:
    """``{"request_id":…,"trace_id":…,"attempt":N`` per row, built as one fixed-width byte block."""
    n = len(src)
    attempt = np.where(plain, d.attempt[src], 1).astype(np.uint8)
    assert n == 0 or attempt.max() <= 9, "attempt is written as one digit"
    head = _ascii_block(
        n,
        b'{"request_id":"req_',
        ids.hex_ascii(rid),
        b'","trace_id":"',
        ids.hex_ascii(d.trace_hi[src]),
        ids.hex_ascii(d.trace_lo[src]),
        b'","attempt":',
        (attempt + ord("0"))[:, None],
    )
    return ids.ascii_rows_to_series(head, "head")


def _retry_ofs(d: DayRequests, src: np.ndarray, plain: np.ndarray) -> pl.Series:
    """``,"retry_of":…`` for the plain rows that retry another, null elsewhere."""
    retry_row = np.where(plain, d.retry_of[src], -1)
    retry_at = np.flatnonzero(retry_row >= 0)
    retry = pl.repeat(None, len(src), dtype=pl.Utf8, eager=True)
    if retry_at.size:
        block = _ascii_block(retry_at.size, b',"retry_of":"req_', ids.hex_ascii(d.rid[retry_row[retry_at]]), b'"')
        retry = retry.scatter(retry_at, ids.ascii_rows_to_series(block, "retry"))
    return retry


def _line_parts(pop: Population, d: DayRequests, src: np.ndarray, head: pl.Series, retry: pl.Series) -> pl.DataFrame:
    """One column per piece of a line: values to print, and pre-rendered text looked up by code."""
    st = _static_tables()
    family = d.family[src]
    ts = d.ts_us[src]
    user = d.user[src]
    who = np.where(user >= 0, user, len(pop.user_ids) + d.tenant[src])
    n_instances = len(d.fleet.names)
    service = (
        ((d.version[src].astype(np.int64) * n_instances + d.instance[src]) * _NT + d.template[src] + 1) * _NP
        + d.pipeline[src]
        + 1
    )
    tail = (
        ((_STATUS_INDEX[d.status[src]] * (len(FINISH_REASONS) + 1) + d.finish[src] + 1) * 2 + d.cache_hit[src])
        * len(FAMILIES)
        + family
    ) * len(CLIENTS) + d.client[src]
    queue = d.queue_us[src]
    return pl.DataFrame(
        {
            "head": head,
            "retry": retry,
            "epoch": _FAM_EPOCH[family],
            "ts_ms": ts // 1000,
            "local": (ts + _FAM_OFFSET_US[family]).astype("datetime64[us]"),
            "ts_len": _FAM_TS_LEN[family],
            "suffix": st["ts_suffix"].gather(family),
            "dur": _ms(d.duration_us[src]),
            "ttft": pl.Series(_ms(d.ttft_us[src])),
            "has_ttft": d.ttft_us[src] >= 0,
            "stages": queue >= 0,
            "queue": _ms(queue),
            "pre": _ms(d.pre_us[src]),
            "inf": _ms(d.inf_us[src]),
            "post": _ms(d.post_us[src]),
            "who": _who_table(pop).gather(who),
            "service": _service_table(d.fleet).gather(service),
            "in": d.in_tok[src],
            "out": d.out_tok[src],
            "cached": d.cached_tok[src],
            "batch": d.batch[src],
            "tail": st["tail"].gather(tail),
        }
    )


def _text(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.Utf8)


def _line() -> pl.Expr:
    """A request's JSON line from the columns of :func:`_line_parts` (absent keys are left out)."""
    rfc = pl.col("local").dt.strftime("%Y-%m-%dT%H:%M:%S%.6f").str.slice(0, pl.col("ts_len"))
    return pl.concat_str(
        [
            pl.col("head"),
            pl.col("retry"),
            pl.when(pl.col("epoch"))
            .then(pl.lit(',"ts":') + _text("ts_ms"))
            .otherwise(pl.concat_str([pl.lit(',"ts":"'), rfc, pl.col("suffix")])),
            pl.lit(',"duration_ms":'),
            _text("dur"),
            pl.when(pl.col("has_ttft")).then(pl.lit(',"ttft_ms":') + _text("ttft")),
            pl.when(pl.col("stages")).then(
                pl.concat_str(
                    [
                        pl.lit(',"queue_ms":'),
                        _text("queue"),
                        pl.lit(',"preprocess_ms":'),
                        _text("pre"),
                        pl.lit(',"inference_ms":'),
                        _text("inf"),
                        pl.lit(',"postprocess_ms":'),
                        _text("post"),
                    ]
                )
            ),
            pl.col("who"),
            pl.col("service"),
            _text("in"),
            pl.lit(',"output_tokens":'),
            _text("out"),
            pl.lit(',"cached_input_tokens":'),
            _text("cached"),
            pl.when(pl.col("batch") >= 0).then(pl.lit(',"batch_size":') + _text("batch")),
            pl.col("tail"),
        ],
        ignore_nulls=True,
    )


def encode_feedback(
    rid: np.ndarray, ts_us: np.ndarray, kind: pl.Series, value: pl.Series, source: pl.Series
) -> pl.Series:
    """Feedback JSON lines ``{"request_id","ts","kind","value","source"}``, each ending in ``\\n``.

    ``kind``, ``value`` and ``source`` are String series; ``ts`` is written as RFC 3339
    UTC with milliseconds.
    """
    df = pl.DataFrame(
        {
            "rid": ids.hex_series("rid", "req_", rid),
            "ts": pl.Series(ts_us.astype("datetime64[us]")).dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"),
            "kind": pl.Series(kind, dtype=pl.Utf8),
            "value": pl.Series(value, dtype=pl.Utf8),
            "source": pl.Series(source, dtype=pl.Utf8),
        }
    )
    line = pl.concat_str(
        [
            pl.lit('{"request_id":"'),
            pl.col("rid"),
            pl.lit('","ts":"'),
            pl.col("ts"),
            pl.lit('","kind":"'),
            pl.col("kind"),
            pl.lit('","value":"'),
            pl.col("value"),
            pl.lit('","source":"'),
            pl.col("source"),
            pl.lit('"}\n'),
        ]
    )
    return df.select(line.alias("line"))["line"]
