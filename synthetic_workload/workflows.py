"""Multi-step workflows: traces of several calls and the spans around them, with their ground truth.

Per day ``round_half_up(WORKFLOW_SHARE × requests_per_day)`` traces (1 %), split over :data:`SHAPES`:

- **RAG** (``rag.query: retrieve > rerank > chat``): a web handler's span ``rag.query`` (no call), under it
  a vector-store lookup ``retrieve`` (no call), then a ``rerank`` call and a ``chat`` call, strictly in
  sequence. On a slow-retrieval day (:func:`slow_retrieval_day`: the run's second day and every third after
  it, a degraded vector store) ``retrieve`` is slow in a majority of them (``ceil(SLOW_SHARE × traces)``):
  ×5–10, and at least 1.1× the trace's other steps, so it is their slowest step and the shape's most often
  slowest; elsewhere ``chat`` is always the slowest.
- **Agent** (``invoke_agent: chat > execute_tool > chat``, and with two tools run in parallel
  ``invoke_agent: chat > execute_tool > execute_tool > chat``): the root is an ``invoke_agent`` call, then
  ``gpt-4o-mini`` chat calls around ``execute_tool`` calls. The agent's call and the tools' name no model and
  carry no tokens (``gen_ai.agent.name``, ``gen_ai.tool.name`` in their attributes): an agent's usage is
  its model calls', so a trace's tokens and cost are its model calls' sums, and the requests per model
  (the manifest's, the marts') count model calls only.

Every step is a child of its trace's root. Every call has ``trace_id`` (32 hex), ``span_id`` (16 hex) and,
below the root, ``parent_span_id``; all succeed (status 200) and have ``attempt`` 1. Retry chains of the
hourly traffic share a trace id but carry no span id, so a *multi-call trace* is a trace with at least two
rows carrying a ``span_id``. The calls of a day are canonical JSON lines in
``requests/date=D/workflows-YYYYMMDD.jsonl.gz``; the spans that are no call are OTLP/JSON in
``requests/date=D/workflows-YYYYMMDD.otlp.json.gz``, one ``{"resourceSpans":[…]}`` export per RAG trace (the
SDK's JSON file exporter's shape; resource ``service.name`` ``rag-app``, ``service.instance.id`` one of
:data:`INSTANCES` a day, ``tenant.id``), so DWD puts them in ``dwd.span`` and counts each line trace-only.

Ground truth (``manifest["planted"]["workflows"]``): per day and shape, ``shape`` is the root's name, ``": "``,
then the names of the trace's other steps in start order joined by ``" > "``, where a span's name is its span
name (``rag.query``, ``retrieve``) and a call's its operation (``chat``, ``rerank``, ``execute_tool``,
``invoke_agent``); ``steps`` the steps of a trace (the root not counted); ``sequential`` whether every trace of
the shape ran strictly in sequence (each step starts at or after the end of the one before it in start order;
steps of one trace never start at the same microsecond); ``slow_step`` and ``slow_traces`` the planted slow
step and how many traces it is the slowest in (``None`` and 0 but on a slow-retrieval day's RAG shape);
``input_tokens`` and ``output_tokens`` the shape's sums. A trace lies within its UTC day.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from synthetic_workload import ids
from synthetic_workload.catalog import (
    FAMILY_INDEX,
    MODEL_INDEX,
    MODELS,
    SERVER_OFFSET,
    SERVERS,
    VERSION_OFFSET,
    VERSIONS,
)
from synthetic_workload.faults import round_half_up
from synthetic_workload.population import Population
from synthetic_workload.requests import DayPlan
from synthetic_workload.traffic import DAY_US

#: Workflow traces per day, as a share of ``requests_per_day`` (their calls come on top of it).
WORKFLOW_SHARE = 0.01
#: Share of a slow-retrieval day's RAG traces whose ``retrieve`` step is planted slow (rounded up: a majority).
SLOW_SHARE = 0.7
#: The service whose spans the RAG traces' root and retrieval are, and its instances (process lifetimes) a day.
SERVICE, INSTANCES = "rag-app", 3
TOOLS: tuple[str, ...] = ("search_kb", "get_order", "create_ticket")
AGENT = "support-agent"
_MS = 1000


@dataclass(frozen=True)
class Step:
    """A span (``call`` False) or call of a workflow: its name (a call's operation), model, latency and tokens.

    Latency is log-normal around ``median_ms``, clipped to ``clip_ms``; a ``parallel`` step starts 0.5–5 ms
    after the step before it, which it overlaps; any other step starts 1–20 ms after every earlier one ended.
    A call of a model has tokens (log-normal medians; 0 when ``in_median`` or ``out_median`` is 0), a call of
    none has none.
    """

    name: str
    call: bool
    model: str | None
    median_ms: float
    sigma: float
    clip_ms: tuple[float, float]
    in_median: float = 0.0
    out_median: float = 0.0
    parallel: bool = False


@dataclass(frozen=True)
class Shape:
    """A kind of workflow: its root, its steps in start order, its share of the traces and its slow step."""

    root: Step
    steps: tuple[Step, ...]
    share: float
    slow_step: int | None = None  # index into ``steps`` of the step planted slow on a slow-retrieval day

    @property
    def name(self) -> str:
        """The shape's text (see the module docstring), as ``ads.trace_breakdown`` writes it."""
        return f"{self.root.name}: " + " > ".join(s.name for s in self.steps)

    @property
    def sequential(self) -> bool:
        return not any(s.parallel for s in self.steps)


_RAG_CHAT = Step("chat", True, "aurora-chat-8b", 700, 0.35, (300, 2500), in_median=2500, out_median=250)
_AGENT_CHAT = Step("chat", True, "gpt-4o-mini", 900, 0.4, (300, 4000), in_median=1500, out_median=150)
_TOOL = Step("execute_tool", True, None, 250, 0.6, (50, 3000))
_INVOKE = Step("invoke_agent", True, None, 0, 0, (0, 0))
#: The index of the RAG shape in :data:`SHAPES` (the others are agents').
RAG = 0
SHAPES: tuple[Shape, ...] = (
    Shape(
        Step("rag.query", False, None, 0, 0, (0, 0)),
        (
            Step("retrieve", False, None, 120, 0.3, (40, 240)),
            Step("rerank", True, "bge-reranker-v2", 60, 0.3, (20, 250), in_median=2000),
            _RAG_CHAT,
        ),
        0.5,
        slow_step=0,
    ),
    Shape(_INVOKE, (_AGENT_CHAT, _TOOL, _AGENT_CHAT), 0.25),
    Shape(_INVOKE, (_AGENT_CHAT, _TOOL, Step(**{**_TOOL.__dict__, "parallel": True}), _AGENT_CHAT), 0.25),
)
#: Step names (span names and operations) and models as codes.
NAMES: tuple[str, ...] = tuple(dict.fromkeys(s.name for sh in SHAPES for s in (sh.root, *sh.steps)))


def workflow_count(requests_per_day: int) -> int:
    return round_half_up(WORKFLOW_SHARE * requests_per_day)


@dataclass(frozen=True)
class DayWorkflows:
    """A day's workflow traces as flat columns: traces, and their nodes (root first, then steps in start order).

    Codes: ``name`` indexes :data:`NAMES`, ``model`` ``catalog.MODELS`` (-1: none), ``tool`` :data:`TOOLS` (-1:
    none), ``server`` ``catalog.SERVERS`` (-1: none); tokens are -1 where absent; ``parent`` is a node index.
    """

    date: dt.date
    instance_ids: list[str]  # the service's instances of the day
    shape: np.ndarray  # per trace
    tenant: np.ndarray
    user: np.ndarray
    instance: np.ndarray
    slow: np.ndarray
    trace_hi: np.ndarray
    trace_lo: np.ndarray
    trace: np.ndarray  # per node: its trace
    call: np.ndarray
    name: np.ndarray
    model: np.ndarray
    tool: np.ndarray
    server: np.ndarray
    parent: np.ndarray
    start_us: np.ndarray
    duration_us: np.ndarray
    in_tok: np.ndarray
    out_tok: np.ndarray
    span_id: np.ndarray
    request_id: np.ndarray

    @property
    def calls(self) -> np.ndarray:
        """Node indices of the calls, in time order."""
        at = np.flatnonzero(self.call)
        return at[np.argsort(self.start_us[at], kind="stable")]

    @property
    def span_traces(self) -> np.ndarray:
        """Trace indices of the traces with spans that are no call, in time order."""
        roots = np.flatnonzero(~self.call & (self.parent < 0))
        return self.trace[roots[np.argsort(self.start_us[roots], kind="stable")]]

    def planted(self) -> list[dict]:
        """The day's ``manifest["planted"]["workflows"]`` entries, one per shape that occurs."""
        out = []
        for k, shape in enumerate(SHAPES):
            traces = self.shape == k
            if not traces.any():
                continue
            nodes = traces[self.trace]
            slow = int((self.slow & traces).sum())  # only a slow step's shape has slow traces
            out.append(
                {
                    "event_date": self.date.isoformat(),
                    "shape": shape.name,
                    "traces": int(traces.sum()),
                    "steps": len(shape.steps),
                    "sequential": shape.sequential,
                    "slow_step": shape.steps[shape.slow_step].name if slow and shape.slow_step is not None else None,
                    "slow_traces": slow,
                    "input_tokens": int(np.maximum(self.in_tok[nodes], 0).sum()),
                    "output_tokens": int(np.maximum(self.out_tok[nodes], 0).sum()),
                }
            )
        return out


def generate_workflows(pop: Population, plan: DayPlan) -> DayWorkflows:
    """Draw the day's workflow traces (deterministic in seed and day)."""
    rng = np.random.default_rng(np.random.SeedSequence([plan.seed, 7, plan.day_index]))
    n = workflow_count(plan.requests)
    shape = np.repeat(np.arange(len(SHAPES)), rng.multinomial(n, [s.share for s in SHAPES]))
    tenant = pop.sample_tenants(rng, n)
    user = pop.sample_normal_users(rng, tenant)
    t0 = plan.day_start_us + np.sort(rng.integers(0, DAY_US - 120 * 1_000_000, n))
    slow = np.zeros(n, dtype=bool)
    parts = []
    for k, sh in enumerate(SHAPES):
        at = np.flatnonzero(shape == k)
        if sh.slow_step is not None and slow_retrieval_day(plan.day_index):
            slow[rng.choice(at, math.ceil(SLOW_SHARE * at.size), replace=False)] = True
        parts.append(_shape_nodes(rng, sh, at, t0[at], slow[at]))
    nodes = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    order = np.lexsort((nodes["pos"], nodes["trace"]))  # by trace, root first, then steps in start order
    nodes = {key: v[order] for key, v in nodes.items()}
    first = np.searchsorted(nodes["trace"], np.arange(n))
    parent = np.where(nodes["pos"] > 0, first[nodes["trace"]], -1)
    model = nodes["model"]
    family = np.array([FAMILY_INDEX[m.families[0][0]] for m in MODELS])[np.maximum(model, 0)]
    servers = np.array([f for f, _ in SERVERS])
    per_family = np.bincount(servers, minlength=len(FAMILY_INDEX))
    server = np.where(
        model >= 0, SERVER_OFFSET[family] + (rng.random(model.size) * per_family[family]).astype(np.int64), -1
    )
    rows = np.arange(model.size, dtype=np.int64)
    call = nodes["call"]
    return DayWorkflows(
        date=plan.date,
        instance_ids=ids.hex_strings(
            f"{SERVICE}-",
            ids.structured_ids(plan.seed, ids.NS_SPAN, plan.day_index, (1 << 31) + np.arange(INSTANCES)),
            digits=8,
        ),
        shape=shape,
        tenant=tenant,
        user=user,
        instance=rng.integers(0, INSTANCES, n),
        slow=slow,
        trace_hi=ids.structured_ids(plan.seed, ids.NS_WORKFLOW_TRACE, plan.day_index, np.arange(n)),
        trace_lo=ids.structured_ids(plan.seed, ids.NS_WORKFLOW_TRACE + 8, plan.day_index, np.arange(n)),
        trace=nodes["trace"],
        call=call,
        name=nodes["name"],
        model=model,
        tool=np.where(nodes["name"] == NAMES.index("execute_tool"), rng.integers(0, len(TOOLS), model.size), -1),
        server=server,
        parent=parent,
        start_us=nodes["start"],
        duration_us=nodes["duration"],
        in_tok=nodes["in_tok"],
        out_tok=nodes["out_tok"],
        span_id=ids.structured_ids(plan.seed, ids.NS_SPAN, plan.day_index, rows),
        request_id=ids.structured_ids(plan.seed, ids.NS_WORKFLOW_REQUEST, plan.day_index, rows),
    )


def slow_retrieval_day(day_index: int) -> bool:
    """Whether the RAG traces' ``retrieve`` is planted slow on this day of the run (its second, then every third)."""
    return day_index % 3 == 1


def _lognormal_ms(rng: np.random.Generator, step: Step, n: int) -> np.ndarray:
    ms = np.clip(step.median_ms * rng.lognormal(0.0, step.sigma, n), *step.clip_ms)
    return np.rint(ms * _MS).astype(np.int64)


def _shape_nodes(
    rng: np.random.Generator, shape: Shape, traces: np.ndarray, t0: np.ndarray, slow: np.ndarray
) -> dict[str, np.ndarray]:
    """The nodes of one shape's traces (``pos`` 0 the root, then each step), timed and with tokens."""
    n, steps = traces.size, shape.steps
    duration = np.stack([_lognormal_ms(rng, s, n) for s in steps], axis=1) if n else np.zeros((0, len(steps)), int)
    if shape.slow_step is not None:  # ×5–10, and at least 1.1× the trace's other steps
        j = shape.slow_step
        others = np.delete(duration, j, axis=1).max(axis=1)
        planted = np.maximum(duration[:, j] * rng.uniform(5, 10, n), 1.1 * others).astype(np.int64)
        duration[:, j] = np.where(slow, planted, duration[:, j])
    start = np.empty_like(duration)
    end_all = t0.copy()
    for j, step in enumerate(steps):
        if step.parallel:
            start[:, j] = start[:, j - 1] + rng.integers(500, 5_000, n)
        else:
            start[:, j] = end_all + rng.integers(_MS, 20 * _MS, n)
        end_all = np.maximum(end_all, start[:, j] + duration[:, j])
    root_end = end_all + rng.integers(_MS, 10 * _MS, n)
    all_steps = (shape.root, *steps)
    k = len(all_steps)
    model = np.array([MODEL_INDEX[s.model] if s.model else -1 for s in all_steps])
    in_tok = np.full((n, k), -1, dtype=np.int64)
    out_tok = np.full((n, k), -1, dtype=np.int64)
    for j, s in enumerate(all_steps):
        if s.model is None:
            continue
        spec = MODELS[MODEL_INDEX[s.model]]
        in_tok[:, j] = out_tok[:, j] = 0
        if s.in_median:
            in_tok[:, j] = np.clip(s.in_median * rng.lognormal(0, 0.5, n), 1, spec.context).astype(np.int64)
        if s.out_median:
            out_tok[:, j] = np.clip(s.out_median * rng.lognormal(0, 0.6, n), 1, spec.max_output).astype(np.int64)
    return {
        "trace": np.repeat(traces, k),
        "pos": np.tile(np.arange(k), n),
        "call": np.tile([s.call for s in all_steps], n),
        "name": np.tile([NAMES.index(s.name) for s in all_steps], n),
        "model": np.tile(model, n),
        "start": np.column_stack([t0, start]).reshape(-1),
        "duration": np.column_stack([root_end - t0, duration]).reshape(-1),
        "in_tok": in_tok.reshape(-1),
        "out_tok": out_tok.reshape(-1),
    }


# ---- encoding ----------------------------------------------------------------------------------------------


def _lookup(values: list[str], codes: np.ndarray) -> pl.Series:
    """``values[code]`` per row, null where the code is -1."""
    table = pl.Series([*values, None], dtype=pl.Utf8)
    return table.gather(np.where(codes >= 0, codes, len(values)))


def _hex(name: str, *parts: np.ndarray) -> pl.Series:
    return ids.hex_series(name, "", *parts)


def _us_text(values_us: np.ndarray) -> pl.Series:
    """RFC 3339 UTC with microseconds."""
    return pl.Series(values_us.astype("datetime64[us]")).dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")


def encode_calls(pop: Population, w: DayWorkflows) -> pl.Series:
    """The calls' canonical JSON lines (each ending in ``\\n``), in time order."""
    at = w.calls
    tr = w.trace[at]
    model = w.model[at]
    parent = w.parent[at]
    version = np.where(model >= 0, VERSION_OFFSET[np.maximum(model, 0)], -1)
    frame = pl.DataFrame(
        {
            "rid": ids.hex_series("rid", "req_", w.request_id[at]),
            "trace": _hex("trace", w.trace_hi[tr], w.trace_lo[tr]),
            "span": _hex("span", w.span_id[at]),
            "parent": _hex("parent", w.span_id[np.maximum(parent, 0)]),
            "root": parent < 0,
            "ts": _us_text(w.start_us[at]),
            "dur": w.duration_us[at] / 1000.0,
            "tenant": pl.Series(pop.tenant_ids).gather(w.tenant[tr]),
            "user": pl.Series(pop.user_ids).gather(w.user[tr]),
            "key": pl.Series(pop.api_key_ids).gather(pop.user_key[w.user[tr]]),
            "op": _lookup(list(NAMES), w.name[at]),
            "model": _lookup([m.name for m in MODELS], model),
            "version": _lookup([v for _, v in VERSIONS], version),
            "provider": _lookup([m.provider for m in MODELS], model),
            "server": _lookup([s for _, s in SERVERS], w.server[at]),
            "in": w.in_tok[at],
            "out": w.out_tok[at],
            "chat": w.name[at] == NAMES.index("chat"),
            "tool": _lookup(list(TOOLS), w.tool[at]),
            "agent": w.shape[tr] != RAG,
        }
    )
    text = lambda c: pl.col(c).cast(pl.Utf8)  # noqa: E731
    has = lambda c: pl.col(c).is_not_null()  # noqa: E731
    tokens = pl.col("in") >= 0
    line = pl.concat_str(
        [
            pl.lit('{"request_id":"'),
            pl.col("rid"),
            pl.lit('","trace_id":"'),
            pl.col("trace"),
            pl.lit('","span_id":"'),
            pl.col("span"),
            pl.when(~pl.col("root")).then(pl.lit('","parent_span_id":"') + pl.col("parent")),
            pl.lit('","attempt":1,"ts":"'),
            pl.col("ts"),
            pl.lit('","duration_ms":'),
            text("dur"),
            pl.lit(',"tenant_id":"'),
            pl.col("tenant"),
            pl.lit('","user_id":"'),
            pl.col("user"),
            pl.lit('","api_key_id":"'),
            pl.col("key"),
            pl.lit('","operation":"'),
            pl.col("op"),
            pl.lit('"'),
            pl.when(has("model")).then(
                pl.concat_str(
                    [
                        pl.lit(',"model":"'),
                        pl.col("model"),
                        pl.lit('","model_version":"'),
                        pl.col("version"),
                        pl.lit('","provider":"'),
                        pl.col("provider"),
                        pl.lit('"'),
                    ]
                )
            ),
            pl.when(has("server")).then(pl.lit(',"server":"') + pl.col("server") + pl.lit('"')),
            pl.when(tokens).then(
                pl.concat_str(
                    [
                        pl.lit(',"input_tokens":'),
                        text("in"),
                        pl.lit(',"output_tokens":'),
                        text("out"),
                        pl.lit(',"cached_input_tokens":0'),
                    ]
                )
            ),
            pl.lit(',"status_code":200'),
            pl.when(pl.col("chat")).then(pl.lit(',"finish_reason":"stop"')),
            pl.lit(',"cache_hit":false,"attributes":{'),
            pl.when(pl.col("agent"))
            .then(pl.lit(f'"gen_ai.agent.name":"{AGENT}"'))
            .otherwise(pl.lit(f'"service.name":"{SERVICE}"')),
            pl.when(has("tool")).then(pl.lit(',"gen_ai.tool.name":"') + pl.col("tool") + pl.lit('"')),
            pl.lit("}}\n"),
        ],
        ignore_nulls=True,
    )
    return frame.select(line.alias("line"))["line"]


#: Span kind (SERVER, CLIENT) and pre-rendered attributes of each span that is no call, by name.
_SPAN_KINDS = {"rag.query": 2, "retrieve": 3}
_SPAN_ATTRIBUTES = {
    "rag.query": [("http.request.method", "POST"), ("http.route", "/v1/ask")],
    "retrieve": [("db.system.name", "qdrant"), ("db.operation.name", "search"), ("db.collection.name", "docs")],
}


def _attributes_text(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f'{{"key":"{k}","value":{{"stringValue":"{v}"}}}}' for k, v in pairs)


def encode_spans(pop: Population, w: DayWorkflows) -> pl.Series:
    """The spans that are no call as OTLP/JSON export lines (each ending in ``\\n``), one per trace, in time order."""
    at = np.flatnonzero(~w.call)
    tr = w.trace[at]
    parent = w.parent[at]
    names = [n for n in NAMES if n in _SPAN_KINDS]
    code = np.searchsorted(np.array([NAMES.index(n) for n in names]), w.name[at])
    spans = pl.DataFrame(
        {
            "trace_no": tr,
            "trace": _hex("trace", w.trace_hi[tr], w.trace_lo[tr]),
            "span": _hex("span", w.span_id[at]),
            "parent": _hex("parent", w.span_id[np.maximum(parent, 0)]),
            "root": parent < 0,
            "name": _lookup(names, code),
            "kind": _lookup([str(_SPAN_KINDS[n]) for n in names], code),
            "attrs": _lookup([_attributes_text(_SPAN_ATTRIBUTES[n]) for n in names], code),
            "start": w.start_us[at] * 1000,
            "end": (w.start_us[at] + w.duration_us[at]) * 1000,
        }
    )
    span = pl.concat_str(
        [
            pl.lit('{"traceId":"'),
            pl.col("trace"),
            pl.lit('","spanId":"'),
            pl.col("span"),
            pl.when(~pl.col("root")).then(pl.lit('","parentSpanId":"') + pl.col("parent")),
            pl.lit('","name":"'),
            pl.col("name"),
            pl.lit('","kind":'),
            pl.col("kind"),
            pl.lit(',"startTimeUnixNano":"'),
            pl.col("start").cast(pl.Utf8),
            pl.lit('","endTimeUnixNano":"'),
            pl.col("end").cast(pl.Utf8),
            pl.lit('","attributes":['),
            pl.col("attrs"),
            pl.lit('],"status":{"code":1}}'),
        ],
        ignore_nulls=True,
    )
    per_trace = (
        spans.select("trace_no", span.alias("span"))
        .group_by("trace_no", maintain_order=True)
        .agg(pl.col("span").str.join(","))
    )
    order = w.span_traces
    per_trace = pl.DataFrame({"trace_no": order}).join(per_trace, on="trace_no", how="left", maintain_order="left")
    resource = pl.concat_str(
        [
            pl.lit('{"resourceSpans":[{"resource":{"attributes":['),
            pl.lit(_attributes_text([("service.name", SERVICE)]) + ","),
            pl.lit('{"key":"service.instance.id","value":{"stringValue":"'),
            pl.col("instance"),
            pl.lit('"}},{"key":"tenant.id","value":{"stringValue":"'),
            pl.col("tenant"),
            pl.lit(f'"}}}}]}},"scopeSpans":[{{"scope":{{"name":"{SERVICE}"}},"spans":['),
            pl.col("span"),
            pl.lit("]}]}]}\n"),
        ]
    )
    return per_trace.with_columns(
        instance=pl.Series(w.instance_ids).gather(w.instance[order]),
        tenant=pl.Series(pop.tenant_ids).gather(w.tenant[order]),
    ).select(resource.alias("line"))["line"]


def day_files(pop: Population, w: DayWorkflows) -> list[tuple[str, pl.Series]]:
    """The day's workflow files (path under the output root, lines): its calls, its spans; none when empty."""
    stem = f"requests/date={w.date.isoformat()}/workflows-{w.date:%Y%m%d}"
    files = [(f"{stem}.jsonl.gz", encode_calls(pop, w)), (f"{stem}.otlp.json.gz", encode_spans(pop, w))]
    return [(rel, lines) for rel, lines in files if len(lines)]
