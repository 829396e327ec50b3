"""Attribute policies: which of a producer's leftover attributes may leave the raw layer.

A column that holds a JSON object of attributes (``dwd.request.attributes``) names its policy in
its contract (``customProperties: attributePolicy: <name>``); the policy is the YAML file
``contracts/policies/<name>.yaml``, whose comments say what each list means. :meth:`AttributePolicy.clean`
applies it to one value. Producers put prompts, user ids, emails, IP addresses, key hashes,
headers and error text in attributes; none of that may reach a layer above ODS.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from contracts.errors import ContractError

if TYPE_CHECKING:
    import polars as pl

POLICIES_DIR = Path(__file__).resolve().parent / "policies"
#: A nested value deeper than this is dropped whole (no recursion without bound).
MAX_DEPTH = 32
_LISTS = ("keep", "drop", "inner", "values")
#: A quoted key of a Python-literal value: ``'user': …`` / ``"user": …``.
_QUOTED_KEY = re.compile(r"""['"]([^'"\\]{1,200})['"]\s*:""")
#: What a nested value becomes when the policy drops it.
_DROP = object()
#: A JSON object of one level written compactly, of keys and values with no escape, control character,
#: brace or bracket, numbers as integers (no sign on 0): :meth:`AttributePolicy.clean` gives such a text
#: back unchanged unless it drops a key or a value, so it is judged by its keys alone. Most rows are such.
_TEXT = r'"[^"\\{\[\x00-\x1f]*"'
_MEMBER = rf"{_TEXT}:(?:{_TEXT}|0|-?[1-9][0-9]*|true|false|null)"
_FLAT = rf"^\{{{_MEMBER}(?:,{_MEMBER})*\}}$"


def _matcher(patterns: list[str]) -> re.Pattern[str]:
    """One regular expression matching any of the shell-wildcard ``patterns`` (whole keys)."""
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"(?:{fnmatch.translate(p.lower())})" for p in patterns), re.DOTALL)


@dataclass(frozen=True)
class AttributePolicy:
    """A parsed attribute policy (see the module docstring)."""

    name: str
    keep: tuple[str, ...]
    #: Reason (``content``, ``identity``, ``headers``, ``errors`` …) → key patterns.
    drop: tuple[tuple[str, tuple[str, ...]], ...]
    inner: tuple[str, ...]
    values: tuple[str, ...]

    @functools.cached_property
    def _keep(self) -> re.Pattern[str]:
        return _matcher(list(self.keep))

    @functools.cached_property
    def _drop(self) -> re.Pattern[str]:
        return _matcher([p for _, patterns in self.drop for p in patterns])

    @functools.cached_property
    def _inner(self) -> re.Pattern[str]:
        return _matcher(list(self.inner))

    @functools.cached_property
    def _values(self) -> re.Pattern[str]:
        return re.compile("|".join(f"(?:{v})" for v in self.values) or r"(?!)")

    def dropped(self, key: str) -> bool:
        """Whether the attribute ``key`` (a top-level or dotted nested path) never leaves ODS."""
        low = key.lower()
        return not self._keep.fullmatch(low) and self._drop.fullmatch(low) is not None

    def clean_column(self, texts: pl.Series) -> pl.Series:
        """:meth:`clean` of every text of a column, the same values: a flat object (``_FLAT``) that holds
        no value the policy drops is decided by its set of keys, once per distinct set; the rest one by
        one (a million rows of attributes cost 12 s of parsing one by one)."""
        import polars as pl

        texts = texts.cast(pl.String)
        distinct = texts.unique()
        if 0 < distinct.len() * 2 <= texts.len():  # a column of few values (a gateway's attributes): each once
            return texts.replace_strict(distinct, self.clean_column(distinct), return_dtype=pl.String)
        frame = pl.DataFrame({"text": texts})
        try:  # the value patterns in DuckDB's and polars' (Rust) dialect, where they compile
            suspect = frame.select(pl.col("text").str.contains(self._values.pattern).fill_null(True)).to_series()
        except pl.exceptions.ComputeError:
            suspect = pl.repeat(True, frame.height, eager=True)
        keys = pl.col("text").str.extract_all(r'"[^"]*":').list.eval(pl.element().str.slice(1).str.head(-2))
        frame = frame.with_columns(
            flat=pl.col("text").str.contains(_FLAT).fill_null(False) & ~suspect,
            keys=keys.list.join("\x1f"),
            repeated=keys.list.n_unique() != keys.list.len(),
        )
        sets = frame.filter("flat").get_column("keys").unique().to_list()
        whole = [k for k in sets if not any(self.dropped(key) for key in k.split("\x1f"))]
        fast = (pl.col("flat") & ~pl.col("repeated").fill_null(True) & pl.col("keys").is_in(whole)).fill_null(False)
        passed = frame.select(fast).to_series()
        slow = frame.get_column("text").filter(~passed)
        cleaned = pl.Series([self.clean(text) for text in slow.to_list()], dtype=pl.String)
        out = frame.get_column("text").scatter(passed.not_().arg_true(), cleaned) if slow.len() else frame["text"]
        return out.alias(texts.name)

    def clean(self, text: str | None) -> str | None:
        """``text`` (a JSON object of attributes) without what the policy drops; None when nothing
        is left, or when the text is not a JSON object (nothing in it can be told apart)."""
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(doc, dict):
            return None
        kept = self._object(doc, "", 0, top=True)
        return json.dumps(kept, ensure_ascii=False, separators=(",", ":")) if kept else None

    def _object(self, doc: dict[str, Any], path: str, depth: int, *, top: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in doc.items():
            full = f"{path}{key}"
            if self.dropped(full) or (not top and self._inner.fullmatch(key.lower())):
                continue
            if top and self._keep.fullmatch(full.lower()):
                out[key] = value
                continue
            cleaned = self._value(value, f"{full}.", depth + 1)
            if cleaned is not _DROP:
                out[key] = cleaned
        return out

    def _value(self, value: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            return _DROP
        if isinstance(value, dict):
            return self._object(value, path, depth, top=False)
        if isinstance(value, list):
            items = [self._value(v, path, depth + 1) for v in value]
            return [v for v in items if v is not _DROP]
        if isinstance(value, str):
            return self._text(value, path, depth)
        return value

    def _text(self, value: str, path: str, depth: int) -> Any:
        """A text value: dropped when it matches a value pattern; a JSON object or array inside
        it cleaned and written back; a structured non-JSON text dropped when it quotes an inner key."""
        if self._values.search(value):
            return _DROP
        stripped = value.strip()
        if stripped[:1] not in ("{", "["):
            return value
        try:
            inner = json.loads(stripped)
        except (ValueError, RecursionError):
            quoted = (k.lower() for k in _QUOTED_KEY.findall(stripped))
            return _DROP if any(self._inner.fullmatch(k) for k in quoted) else value
        if not isinstance(inner, (dict, list)):
            return value
        cleaned = self._value(inner, path, depth + 1)
        if cleaned == inner:
            return value
        return _DROP if cleaned is _DROP else json.dumps(cleaned, ensure_ascii=False, separators=(", ", ": "))


@functools.cache
def load_policy(name: str) -> AttributePolicy:
    """The shipped attribute policy ``name`` (``contracts/policies/<name>.yaml``), read once."""
    path = POLICIES_DIR / f"{name}.yaml"
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not path.is_file():
        known = ", ".join(sorted(p.stem for p in POLICIES_DIR.glob("*.yaml")))
        raise ContractError(f"no attribute policy {name!r}: {path} does not exist (known: {known})")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) - set(_LISTS):
        raise ContractError(f"{path}: an attribute policy is a mapping of {', '.join(_LISTS)}")

    def patterns(value: Any, field: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            raise ContractError(f"{path}: {field}: must be a list of non-empty texts")
        return tuple(value)

    drop = raw.get("drop") or {}
    if not isinstance(drop, dict):
        raise ContractError(f"{path}: drop: must map a reason to a list of key patterns")
    for n, pattern in enumerate(raw.get("values") or []):
        try:
            re.compile(pattern)
        except (re.error, TypeError) as e:
            raise ContractError(f"{path}: values[{n}]: not a regular expression: {e}") from None
    return AttributePolicy(
        name=name,
        keep=patterns(raw.get("keep") or [], "keep"),
        drop=tuple((str(reason), patterns(p, f"drop.{reason}")) for reason, p in drop.items()),
        inner=patterns(raw.get("inner") or [], "inner"),
        values=patterns(raw.get("values") or [], "values"),
    )
