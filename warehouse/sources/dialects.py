"""Producer dialects: how each LLM-telemetry producer's spans are recognised and read, declared as data.

One table (:data:`DIALECTS`, first match wins) says, per producer, which spans are its spans (by
instrumentation scope name, span name and marker attributes), which of them are calls (a request row)
and which are child spans of a call (never a row: LiteLLM's ``raw_gen_ai_request``, OpenLIT's httpx
spans are not even GenAI spans), where each canonical field comes from (:class:`Source`, first
present wins) and how its operation is named. The OpenTelemetry GenAI conventions (:data:`GEN_AI`)
are the last row and the base the others are written against; the reader
(:mod:`warehouse.sources.otlp`) applies the table, ``forget`` and the attribute policy read the
user keys and the call/child rule through :func:`user_keys` and :func:`is_call_span`.

Names were measured on OpenInference 0.1.66, OpenLLMetry 0.62.4, OpenLIT 1.45.0 and LiteLLM 1.80.0
(``docs/design.md``, the producers' conventions packages).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

#: Largest Python-literal attribute value (LiteLLM's ``metadata.usage_object``) read, in characters,
#: and its deepest nesting: it is parsed as data, never evaluated.
LITERAL_MAX_CHARS, LITERAL_MAX_DEPTH = 16_384, 8


@dataclass(frozen=True)
class Source:
    """Where one canonical field's value is found on a span.

    ``key`` is an attribute (span, then scope, then resource), or with ``event`` the name of a span
    event whose time since the span's start is the value (milliseconds). ``path`` reads a value inside
    the attribute's JSON object (``json``) or Python-literal (``literal``) text instead of the whole.
    ``when`` takes the value only where attribute ``when[0]`` has one of the texts ``when[1]``.
    ``unit`` ``"s"`` turns seconds into milliseconds; ``host`` keeps a URL's host; ``values`` maps a
    value to the canonical one (a value it does not name is kept as written).
    """

    key: str
    path: tuple[str, ...] = ()
    inside: str | None = None  # "json" or "literal" (with path)
    event: bool = False
    when: tuple[str, frozenset[str]] | None = None
    unit: str | None = None
    host: bool = False
    values: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if bool(self.path) != (self.inside in ("json", "literal")):
            raise ValueError(f"source {self.key!r}: a path needs inside='json' or 'literal', and inside a path")
        if self.unit not in (None, "s"):
            raise ValueError(f"source {self.key!r}: unit must be 's' or None, not {self.unit!r}")
        plain = not (self.path or self.event or self.when or self.unit or self.host or self.values)
        object.__setattr__(self, "plain", plain)

    #: The attribute's text as written, nothing more to do (the reader's fast path).
    plain: bool = field(init=False, repr=False, compare=False)


def _keys(*keys: str, **options: object) -> tuple[Source, ...]:
    return tuple(Source(key, **options) for key in keys)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Dialect:
    """One producer's spans: how they are recognised, which are calls, where each field comes from.

    A span is the dialect's when its scope name starts with one of ``scopes`` (empty: any scope) and it
    carries one of ``markers`` (an attribute key, or with a trailing ``*`` a key prefix; empty: no
    marker needed). It is a call when its name is not in ``child_spans``, ``call_spans`` is empty or
    holds its name, and ``call_kind`` (an attribute key and its call values) matches where given.
    ``fields`` maps canonical fields to their sources (``user_id`` the end user's, in order; an empty id
    is no user); ``child_users`` names the user on a child span, so ``forget`` finds it with its call.
    ``level`` is where the producer sees a call (one of :data:`LEVELS`): a call seen at several levels of
    one trace is one row, its fields chosen by :data:`PRECEDENCE`.
    """

    name: str
    fields: Mapping[str, tuple[Source, ...]]
    scopes: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    call_spans: tuple[str, ...] = ()
    child_spans: tuple[str, ...] = ()
    child_users: tuple[Source, ...] = ()
    call_kind: tuple[str, frozenset[str]] | None = None
    level: str = "client"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"dialect {self.name!r}: level must be one of {', '.join(LEVELS)}, not {self.level!r}")

    def owns(self, scope: str, span_name: str, keys: frozenset[str] | set[str] | Mapping[str, object]) -> bool:
        """Whether a span (its scope name, name and attribute keys) is this dialect's."""
        if self.scopes and not scope.startswith(self.scopes):
            return False
        return not self.markers or any(_marked(marker, keys) for marker in self.markers)

    def is_call(self, span_name: str, kind: str | None) -> bool:
        """Whether one of this dialect's spans is a call (``kind``: its ``call_kind`` attribute's text)."""
        if span_name in self.child_spans or (self.call_spans and span_name not in self.call_spans):
            return False
        return self.call_kind is None or kind in self.call_kind[1]


#: Where a call can be seen, outermost first: the app's client instrumentation, then a gateway (LiteLLM's
#: proxy) it calls. One call seen at two levels sends two spans in one trace.
LEVELS: tuple[str, ...] = ("client", "gateway")
#: Which span's value the one row of a call seen at several levels keeps, per field: ``"inner"`` (the
#: innermost level first and, at one level, the span that started last: the gateway's team is the tenant,
#: the timings are the innermost span's) or ``"outer"`` (the outermost first, the span that started first:
#: the call as the client saw it). A field not named is ``"outer"``; the first non-null value wins. Lineage
#: (file, line, batch) is the first arrival's.
PRECEDENCE: Mapping[str, str] = MappingProxyType(
    {
        "tenant_id": "inner",
        **dict.fromkeys(
            ("ts", "duration_ms", "ttft_ms", "queue_ms", "preprocess_ms", "inference_ms", "postprocess_ms"), "inner"
        ),
    }
)


def _marked(marker: str, keys: frozenset[str] | set[str] | Mapping[str, object]) -> bool:
    if marker.endswith("*"):
        return any(key.startswith(marker[:-1]) for key in keys)
    return marker in keys


_TTFT_SECONDS = ("gen_ai.response.time_to_first_chunk", "gen_ai.server.time_to_first_token")
_USERS = _keys("user.id", "enduser.id")

#: The OpenTelemetry GenAI semantic conventions (and vLLM's, and Strata's custom keys): any span with
#: a ``gen_ai.*`` attribute of its own is a call.
GEN_AI = Dialect(
    name="gen_ai",
    markers=("gen_ai.*",),
    fields=MappingProxyType(
        {
            "request_id": _keys("gen_ai.response.id", "gen_ai.request.id"),
            "retry_of": _keys("gen_ai.request.retry_of"),
            "attempt": _keys("gen_ai.request.attempt"),
            "tenant_id": _keys("tenant.id"),
            "user_id": _USERS,
            "api_key_id": _keys("api_key.id"),
            "operation": _keys("gen_ai.operation.name", values=MappingProxyType({"text_completion": "completion"})),
            "model": _keys("gen_ai.request.model"),
            "response_model": _keys("gen_ai.response.model"),
            "model_version": _keys("model.version"),
            "provider": _keys("gen_ai.provider.name", "gen_ai.system"),
            "server": _keys("server.address"),
            "server_instance": _keys("service.instance.id"),
            "prompt_template_version": _keys("prompt_template.version"),
            "pipeline_version": _keys("pipeline.version"),
            "input_tokens": _keys("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
            "output_tokens": _keys("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
            "cached_input_tokens": _keys(
                "gen_ai.usage.cache_read.input_tokens",
                "gen_ai.usage.cache_read_input_tokens",
                "gen_ai.usage.input_tokens.cached",
                "gen_ai.usage.cached_tokens",
            ),
            "batch_size": _keys("gen_ai.server.batch_size"),
            "status_code": _keys("http.response.status_code", "http.status_code"),
            "error_type": _keys("error.type"),
            "finish_reason": _keys("gen_ai.response.finish_reasons"),
            "cache_hit": _keys("gen_ai.response.cache_hit"),
            "ttft_ms": _keys(*_TTFT_SECONDS, "gen_ai.latency.time_to_first_token", unit="s"),
            "queue_ms": _keys("gen_ai.latency.time_in_queue", unit="s"),
            "preprocess_ms": _keys("gen_ai.latency.time_in_preprocess", unit="s"),
            "inference_ms": _keys("gen_ai.latency.time_in_model_inference", unit="s"),
            "postprocess_ms": _keys("gen_ai.latency.time_in_postprocess", unit="s"),
        }
    ),
)


def _on(base: Dialect, name: str, fields: Mapping[str, tuple[Source, ...]], **recognised: object) -> Dialect:
    """A dialect written as ``base``'s fields with some replaced."""
    return replace(base, name=name, fields=MappingProxyType({**base.fields, **fields}), **recognised)  # type: ignore[arg-type]


_INVOCATION = ("llm.invocation_parameters", "embedding.invocation_parameters")

#: Arize OpenInference (Phoenix): ``llm.*`` / ``embedding.*`` and ``openinference.span.kind``; the
#: requested model and the user only inside the invocation parameters' JSON; TTFT as a span event.
OPENINFERENCE = _on(
    GEN_AI,
    "openinference",
    {
        "request_id": (),
        "user_id": (*_USERS, *(Source(key, ("user",), "json") for key in _INVOCATION)),
        "operation": _keys(
            "openinference.span.kind", values=MappingProxyType({"LLM": "chat", "EMBEDDING": "embeddings"})
        ),
        "model": tuple(Source(key, ("model",), "json") for key in _INVOCATION),
        "response_model": _keys("llm.model_name", "embedding.model_name"),
        "provider": _keys("llm.provider", "llm.system"),
        "input_tokens": _keys("llm.token_count.prompt"),
        "output_tokens": _keys("llm.token_count.completion"),
        "cached_input_tokens": _keys("llm.token_count.prompt_details.cache_read"),
        "finish_reason": _keys("llm.finish_reason"),
        "ttft_ms": (Source("First Token Stream Event", event=True),),
    },
    markers=("openinference.span.kind",),
    call_kind=("openinference.span.kind", frozenset({"LLM", "EMBEDDING"})),
)

#: Traceloop OpenLLMetry: GenAI conventions plus ``gen_ai.user``, the API base URL for the server and
#: (older releases) ``llm.request.type``, where ``completion`` is a legacy text completion.
OPENLLMETRY = _on(
    GEN_AI,
    "openllmetry",
    {
        "user_id": (*_USERS, Source("gen_ai.user")),
        "server": (Source("server.address"), Source("gen_ai.openai.api_base", host=True)),
        "operation": (
            *GEN_AI.fields["operation"],
            Source("llm.request.type", values=MappingProxyType({"embedding": "embeddings"})),
        ),
    },
    scopes=("opentelemetry.instrumentation.openai.",),
    markers=("gen_ai.*", "llm.*"),
)

#: OpenLIT: GenAI conventions plus ``gen_ai.request.user``; its TTFT is written on every call and
#: means one only where the call streamed.
OPENLIT = _on(
    GEN_AI,
    "openlit",
    {
        "user_id": (*_USERS, Source("gen_ai.request.user")),
        "ttft_ms": _keys(*_TTFT_SECONDS, unit="s", when=("gen_ai.request.stream", frozenset({"true"}))),
    },
    scopes=("openlit.",),
)

_LITELLM_CHAT = frozenset({"completion", "acompletion"})

#: LiteLLM's ``otel`` callback: the call is ``litellm_request`` (``raw_gen_ai_request`` is the provider
#: request under it), named by ``llm.request.type``; the team, cached tokens (a Python literal) and the
#: API base (JSON) sit in ``metadata.*`` and ``hidden_params``.
LITELLM = _on(
    GEN_AI,
    "litellm",
    {
        "tenant_id": _keys("metadata.user_api_key_team_id", "tenant.id"),
        "user_id": (*_USERS, Source("llm.user"), Source("metadata.user_api_key_end_user_id")),
        "operation": _keys(
            "llm.request.type",
            values=MappingProxyType(
                {"completion": "chat", "acompletion": "chat", "embedding": "embeddings", "aembedding": "embeddings"}
            ),
        ),
        "server": (Source("server.address"), Source("hidden_params", ("api_base",), "json", host=True)),
        "output_tokens": tuple(
            replace(source, when=("llm.request.type", _LITELLM_CHAT)) for source in GEN_AI.fields["output_tokens"]
        ),
        "cached_input_tokens": (
            Source("metadata.usage_object", ("prompt_tokens_details", "cached_tokens"), "literal"),
        ),
        "status_code": (*GEN_AI.fields["status_code"], Source("error.code")),
        "finish_reason": _keys("gen_ai.completion.0.finish_reason"),
    },
    scopes=("litellm",),
    markers=(),
    call_spans=("litellm_request",),
    child_spans=("raw_gen_ai_request",),
    child_users=(Source("llm.openai.user"), Source("llm.None.user")),  # ``llm.<provider>.user``, as measured
    level="gateway",
)

#: Every dialect, in the order a span is tried against them (the GenAI conventions last).
DIALECTS: tuple[Dialect, ...] = (OPENINFERENCE, LITELLM, OPENLLMETRY, OPENLIT, GEN_AI)


def dialect_of(scope: str, span_name: str, keys: frozenset[str] | set[str] | Mapping[str, object]) -> Dialect | None:
    """The dialect a span is written in (its scope name, name and attribute keys), else ``None``."""
    return next((d for d in DIALECTS if d.owns(scope, span_name, keys)), None)


def is_call_span(scope: str, span_name: str, attributes: Mapping[str, str | None]) -> bool:
    """Whether a span is a call (one request row), not a child span of a call or no GenAI span at all.

    ``attributes`` maps the span's own attribute keys to their text (only a dialect's ``call_kind``
    attribute is read); ``forget`` and the attribute policy ask this of raw spans.
    """
    dialect = dialect_of(scope, span_name, attributes)
    if dialect is None:
        return False
    kind = attributes.get(dialect.call_kind[0]) if dialect.call_kind else None
    return dialect.is_call(span_name, kind)


def user_keys(dialect: str | None = None) -> tuple[str, ...]:
    """The attributes that name a call's end user, in order: one dialect's, or every dialect's.

    Each is an attribute key, or ``key#path`` for a value inside a JSON-valued attribute
    (``llm.invocation_parameters#user``); a dialect's child-span user keys come last. The API key's
    owner (LiteLLM's ``metadata.user_api_key_user_id``) is never one.
    """
    chosen = DIALECTS if dialect is None else tuple(d for d in DIALECTS if d.name == dialect)
    if not chosen:
        raise ValueError(f"unknown dialect {dialect!r}; one of {', '.join(d.name for d in DIALECTS)}")
    found: dict[str, None] = {}
    for d in chosen:
        for source in (*d.fields["user_id"], *d.child_users):
            found["#".join((source.key, *source.path))] = None
    return tuple(found)


def team_keys() -> tuple[str, ...]:
    """The attributes a span names its team (tenant) by in any dialect, first present wins: each producer's
    own before the conventions' (``metadata.user_api_key_team_id`` before ``tenant.id``), as a span of that
    producer is read. What a gateway token's spans are checked by on the receiver's request path."""
    base = [source.key for source in GEN_AI.fields["tenant_id"] if source.plain]
    own = [source.key for d in DIALECTS for source in d.fields["tenant_id"] if source.plain and source.key not in base]
    return tuple(dict.fromkeys([*own, *base]))


def literal(text: str) -> object:
    """A Python-literal value (dicts, lists, tuples, strings, numbers, ``None``/``True``/``False``) as data.

    Never evaluated: the text is parsed, and only literal nodes are read. Raises ``ValueError`` for
    anything else, text over :data:`LITERAL_MAX_CHARS` or nesting deeper than :data:`LITERAL_MAX_DEPTH`.
    """
    if len(text) > LITERAL_MAX_CHARS:
        raise ValueError(f"a Python literal over {LITERAL_MAX_CHARS} characters")
    depth = deepest = 0
    for char in text:  # brackets inside strings count too: a bound, not a parse
        depth += (char in "([{") - (char in ")]}")
        deepest = max(deepest, depth)
    if deepest > LITERAL_MAX_DEPTH:
        raise ValueError(f"a Python literal nested deeper than {LITERAL_MAX_DEPTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal: {exc}") from None
    return _node(tree.body)


def _node(node: ast.AST) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("not a Python literal: a ** inside a dict")
        return {_node(k): _node(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_node(element) for element in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    raise ValueError(f"not a Python literal: {type(node).__name__}")
