"""The fixed world the generator draws from: server families, models, versions and prices.

Everything here is static data (no randomness). Models and server families are the
"infrastructure" of the simulated AI service; the seeded parts (tenants, users, abusers)
live in :mod:`synthetic_workload.population`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

OPERATIONS: tuple[str, ...] = ("chat", "completion", "embeddings", "rerank", "classify", "detect", "ocr")


@dataclass(frozen=True)
class ServerFamily:
    """A fleet of servers that share a logging convention.

    ``ts_format`` is ``"rfc3339"`` (local time with ``utc_offset_minutes`` and
    ``fraction_digits`` of sub-second precision) or ``"epoch_ms"`` (a JSON integer).
    """

    name: str
    servers: int
    region: str
    ts_format: str
    utc_offset_minutes: int
    fraction_digits: int
    logs_stages: bool  # queue/preprocess/inference/postprocess breakdown present
    batching: bool  # server-side dynamic batching (batch_size present)
    pipeline_versions: tuple[str, ...]  # () = not logged; 2 = upgraded in the middle of the run

    def server_names(self) -> list[str]:
        """The family's servers, then its spare (serving only once a scale-up starts it)."""
        return [f"{self.name}-{i:02d}" for i in range(1, self.servers + 2)]

    @property
    def ts_quantum_us(self) -> int:
        """Resolution of the logged timestamp in microseconds (1 or 1000)."""
        return 1000 if self.ts_format == "epoch_ms" or self.fraction_digits == 3 else 1


FAMILIES: tuple[ServerFamily, ...] = (
    ServerFamily("vllm-sg", 8, "ap-southeast-1", "rfc3339", 480, 6, True, True, ("serve-1.8.2",)),
    ServerFamily("vllm-eu", 4, "eu-west-1", "rfc3339", 0, 3, True, True, ("serve-1.8.2",)),
    ServerFamily("triton-use", 6, "us-east-1", "rfc3339", -300, 3, True, True, ("pl-2.3.0", "pl-2.4.0")),
    ServerFamily("gw-azure", 3, "eastus2", "epoch_ms", 0, 3, False, False, ()),
    ServerFamily("ocrcloud-gw", 2, "ap-south-1", "rfc3339", 330, 6, False, False, ()),
)
FAMILY_INDEX: dict[str, int] = {f.name: i for i, f in enumerate(FAMILIES)}


@dataclass(frozen=True)
class ModelSpec:
    """One served model: where it runs, its versions, token shapes and latency profile.

    Latency: generative models spend ``prefill_us_per_token`` per uncached input token and
    ``decode_us_per_token`` per output token; the others ``base_inference_ms`` scaled by
    input size. All latency draws are log-normal around these medians.
    """

    name: str
    operation: str
    provider: str
    families: tuple[tuple[str, float], ...]
    versions: tuple[str, ...]
    share: float  # share of normal traffic
    context: int
    max_output: int
    in_median: float
    in_sigma: float
    out_median: float  # 0: the operation returns no tokens
    out_sigma: float
    generative: bool
    prefill_us_per_token: float
    decode_us_per_token: float
    base_inference_ms: float
    pre_ms: float
    post_ms: float
    queue_ms: float
    timeout_ms: float
    upstream_error_rate: float
    cache_rate: float  # upper bound of a tenant's cache-hit rate
    templates: tuple[str, ...]  # prompt_template_version values, () = not logged
    oom_prone: bool
    price: tuple[float, float, float]  # input, output, cached input per 1k tokens


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        "aurora-chat-70b",
        "chat",
        "inhouse",
        (("vllm-sg", 0.6), ("vllm-eu", 0.4)),
        ("v3.1", "v3.2"),
        0.24,
        32768,
        1024,
        900,
        1.0,
        220,
        0.9,
        True,
        120,
        28000,
        0,
        3,
        1.5,
        40,
        60000,
        0.001,
        0.35,
        ("chat-tmpl-7", "chat-tmpl-8"),
        True,
        (0.0009, 0.0009, 0.00045),
    ),
    ModelSpec(
        "aurora-chat-8b",
        "chat",
        "inhouse",
        (("vllm-eu", 0.5), ("vllm-sg", 0.5)),
        ("v2.4",),
        0.18,
        8192,
        1024,
        600,
        1.0,
        180,
        0.9,
        True,
        25,
        9000,
        0,
        3,
        1.2,
        25,
        30000,
        0.001,
        0.3,
        ("chat-tmpl-7", "chat-tmpl-8"),
        True,
        (0.0002, 0.0002, 0.0001),
    ),
    ModelSpec(
        "gpt-4o-mini",
        "chat",
        "azure-openai",
        (("gw-azure", 1.0),),
        ("2024-07-18",),
        0.12,
        128000,
        2048,
        1200,
        1.1,
        260,
        0.9,
        True,
        15,
        12000,
        0,
        0,
        0,
        0,
        60000,
        0.008,
        0.4,
        ("chat-tmpl-7", "chat-tmpl-8"),
        False,
        (0.00015, 0.0006, 0.000075),
    ),
    ModelSpec(
        "aurora-code-13b",
        "completion",
        "inhouse",
        (("vllm-eu", 1.0),),
        ("v1.3",),
        0.07,
        16384,
        512,
        1500,
        0.8,
        80,
        1.0,
        True,
        40,
        14000,
        0,
        2,
        1,
        30,
        30000,
        0.001,
        0.5,
        ("cmpl-tmpl-3",),
        True,
        (0.0003, 0.0003, 0.00015),
    ),
    ModelSpec(
        "text-embedding-3-small",
        "embeddings",
        "azure-openai",
        (("gw-azure", 1.0),),
        ("1",),
        0.15,
        8191,
        0,
        300,
        1.0,
        0,
        0,
        False,
        0,
        0,
        35,
        0,
        0,
        0,
        10000,
        0.008,
        0.1,
        (),
        False,
        (0.00002, 0.0, 0.00001),
    ),
    ModelSpec(
        "bge-reranker-v2",
        "rerank",
        "inhouse",
        (("triton-use", 1.0),),
        ("v2.0",),
        0.07,
        8192,
        0,
        2000,
        0.6,
        0,
        0,
        False,
        0,
        0,
        45,
        2,
        0.5,
        15,
        10000,
        0.001,
        0.0,
        (),
        False,
        (0.00005, 0.0, 0.0),
    ),
    ModelSpec(
        "safety-clf",
        "classify",
        "inhouse",
        (("triton-use", 1.0),),
        ("2024.05", "2024.06"),
        0.07,
        4096,
        4,
        400,
        0.9,
        2,
        0.3,
        False,
        0,
        0,
        8,
        1,
        0.3,
        10,
        5000,
        0.001,
        0.0,
        (),
        False,
        (0.00001, 0.0, 0.0),
    ),
    ModelSpec(
        "yolo-det-l",
        "detect",
        "inhouse",
        (("triton-use", 1.0),),
        ("v8.1",),
        0.05,
        4096,
        400,
        765,
        0.05,
        40,
        0.6,
        False,
        0,
        0,
        60,
        18,
        6,
        20,
        10000,
        0.001,
        0.0,
        (),
        True,
        (0.0004, 0.0001, 0.0),
    ),
    ModelSpec(
        "docscan-ocr",
        "ocr",
        "ocrcloud",
        (("ocrcloud-gw", 1.0),),
        ("v5",),
        0.05,
        16000,
        4000,
        1500,
        0.5,
        350,
        0.8,
        False,
        0,
        0,
        900,
        0,
        0,
        0,
        30000,
        0.01,
        0.0,
        (),
        False,
        (0.0015, 0.0005, 0.0),
    ),
)
MODEL_INDEX: dict[str, int] = {m.name: i for i, m in enumerate(MODELS)}

#: Model mix of abusive users: cheap chat and completion endpoints.
ABUSER_MODEL_SHARE: dict[str, float] = {"aurora-chat-8b": 0.45, "gpt-4o-mini": 0.35, "aurora-code-13b": 0.2}

#: Gray release: the model whose second version ramps up over the run.
GRAY_MODEL = "aurora-chat-70b"
#: Canary: a fixed small share of traffic on the newer version.
CANARY_MODEL, CANARY_SHARE = "safety-clf", 0.15

CLIENTS: tuple[str, ...] = (
    "python-sdk/1.4.2",
    "node-sdk/2.1.0",
    "java-sdk/0.9.1",
    "go-sdk/1.0.3",
    "curl/8.5.0",
    "python-requests/2.31.0",
)
#: Client mix of normal and abusive users (same order as CLIENTS).
NORMAL_CLIENT_P = np.array([0.5, 0.25, 0.12, 0.08, 0.05, 0.0])
ABUSER_CLIENT_P = np.array([0.05, 0.0, 0.0, 0.0, 0.45, 0.5])

ERROR_TYPES: tuple[str, ...] = ("invalid_request", "rate_limited", "oom", "timeout", "upstream_error")
# error codes used in the columns: 0 = success, 1..5 = ERROR_TYPES[code - 1]
ERR_NONE, ERR_INVALID, ERR_RATE, ERR_OOM, ERR_TIMEOUT, ERR_UPSTREAM = range(6)

FINISH_REASONS: tuple[str, ...] = ("stop", "length", "content_filter")


def version_weights(model: ModelSpec, day_index: int, days: int) -> np.ndarray:
    """Traffic split over the model's versions on one day (gray release ramps from 15% to 85%)."""
    if len(model.versions) == 1:
        return np.array([1.0])
    if model.name == GRAY_MODEL:
        new = 0.3 if days == 1 else 0.15 + 0.7 * day_index / (days - 1)
    else:
        new = CANARY_SHARE
    return np.array([1.0 - new, new])


def pipeline_upgrade_at(start: dt.date, days: int) -> dt.datetime:
    """When two-version families switch pipeline: noon UTC of the middle day of the run."""
    day = start + dt.timedelta(days=days // 2)
    return dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC)


@dataclass(frozen=True)
class PriceRow:
    model: str
    effective_from: dt.date
    input_per_1k: float
    output_per_1k: float
    cached_per_1k: float


def price_rows(start: dt.date, days: int) -> list[PriceRow]:
    """Price history: an initial row per model before ``start``, one older row for the big
    chat model, and a price cut of gpt-4o-mini in the middle of the generated days."""
    rows = [PriceRow("aurora-chat-70b", start - dt.timedelta(days=180), 0.0012, 0.0012, 0.0006)]
    rows += [PriceRow(m.name, start - dt.timedelta(days=30), *m.price) for m in MODELS]
    rows.append(PriceRow("gpt-4o-mini", start + dt.timedelta(days=days // 2), 0.00012, 0.00048, 0.00006))
    return sorted(rows, key=lambda r: (r.model, r.effective_from))


def _fmt_price(p: float) -> str:
    return f"{p:.8f}".rstrip("0").rstrip(".") if p else "0"


def prices_csv(start: dt.date, days: int) -> bytes:
    """The ``prices.csv`` reference file (header + one row per price period)."""
    lines = ["model,effective_from,input_price_per_1k,output_price_per_1k,cached_input_price_per_1k"]
    for r in price_rows(start, days):
        lines.append(
            f"{r.model},{r.effective_from.isoformat()},{_fmt_price(r.input_per_1k)},"
            f"{_fmt_price(r.output_per_1k)},{_fmt_price(r.cached_per_1k)}"
        )
    return ("\n".join(lines) + "\n").encode()


# ---- flat lookup tables: columns hold small integer codes into these ----------------------

#: (model index, version) for every served version; a row's ``version`` code indexes this.
VERSIONS: tuple[tuple[int, str], ...] = tuple((i, v) for i, m in enumerate(MODELS) for v in m.versions)
VERSION_OFFSET = np.cumsum([0] + [len(m.versions) for m in MODELS[:-1]]).astype(np.int16)
#: (family index, server name), a family's spare last; a row's ``server`` code indexes this.
SERVERS: tuple[tuple[int, str], ...] = tuple((i, s) for i, f in enumerate(FAMILIES) for s in f.server_names())
SERVER_OFFSET = np.cumsum([0] + [f.servers + 1 for f in FAMILIES[:-1]]).astype(np.int16)
#: Whether each server is its family's spare.
SERVER_IS_SPARE = np.array([s == f"{FAMILIES[i].name}-{FAMILIES[i].servers + 1:02d}" for i, s in SERVERS])
TEMPLATES: tuple[str, ...] = tuple(dict.fromkeys(t for m in MODELS for t in m.templates))
PIPELINES: tuple[str, ...] = tuple(dict.fromkeys(p for f in FAMILIES for p in f.pipeline_versions))
