"""The generator's multi-step workflows, read back with gzip + json alone and checked against
``manifest["planted"]["workflows"]``: shapes, counts, steps, the sequential flag, the slow step, tokens."""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from synthetic_workload import generate

START = dt.date(2025, 6, 30)
REQUESTS = 8000
HEX32, HEX16 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")


@dataclass
class Node:
    """A call or a span of a trace, as its line says."""

    trace: str
    span: str
    parent: str | None
    name: str  # a span's name, a call's operation
    start_us: int
    end_us: int
    call: dict | None = None  # the call's line
    resource: dict | None = None  # a span's resource attributes


def _us(ts: str) -> int:
    t = dt.datetime.fromisoformat(ts)
    assert t.tzinfo is not None and t.utcoffset() == dt.timedelta(0), ts
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _attributes(obj: dict) -> dict[str, str]:
    return {a["key"]: a["value"]["stringValue"] for a in obj.get("attributes", [])}


def _nodes(root: Path, date: str) -> list[Node]:
    folder = root / "requests" / f"date={date}"
    stem = f"workflows-{date.replace('-', '')}"
    nodes = []
    for line in gzip.decompress((folder / f"{stem}.jsonl.gz").read_bytes()).splitlines():
        c = json.loads(line)
        start = _us(c["ts"])
        nodes.append(
            Node(
                c["trace_id"],
                c["span_id"],
                c.get("parent_span_id"),
                c["operation"],
                start,
                start + round(c["duration_ms"] * 1000),
                c,
            )
        )
    for line in gzip.decompress((folder / f"{stem}.otlp.json.gz").read_bytes()).splitlines():
        export = json.loads(line)
        assert list(export) == ["resourceSpans"]
        for rs in export["resourceSpans"]:
            resource = _attributes(rs["resource"])
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    start, end = int(s["startTimeUnixNano"]) // 1000, int(s["endTimeUnixNano"]) // 1000
                    parent = s.get("parentSpanId")
                    nodes.append(Node(s["traceId"], s["spanId"], parent, s["name"], start, end, resource=resource))
    return nodes


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("workflows")
    return out, generate(out, days=2, requests_per_day=REQUESTS, seed=3, start=START, fault_rate=0.01)


def test_traces_read_back_match_the_planted_workflows(generated: tuple[Path, dict]) -> None:
    root, manifest = generated
    planted = manifest["planted"]["workflows"]
    assert {p["event_date"] for p in planted} == set(manifest["days"])
    for date in manifest["days"]:
        traces: dict[str, list[Node]] = defaultdict(list)
        for node in _nodes(root, date):
            traces[node.trace].append(node)
        truth = {p["shape"]: p for p in planted if p["event_date"] == date}
        assert sum(p["traces"] for p in truth.values()) == len(traces) == round(0.01 * REQUESTS)
        assert {s for s in truth if s.startswith("rag.query")} and len(truth) == 3

        found: Counter[str] = Counter()
        sequential: dict[str, set[bool]] = defaultdict(set)
        slow: Counter[str] = Counter()
        tokens: Counter[tuple[str, str]] = Counter()
        for trace, nodes in traces.items():
            assert HEX32.fullmatch(trace) and all(HEX16.fullmatch(n.span) for n in nodes)
            spans = {n.span for n in nodes}
            assert len(spans) == len(nodes)
            (top,) = [n for n in nodes if n.parent is None]
            assert all(n.parent in spans for n in nodes if n is not top)  # every parent within the trace
            steps = sorted((n for n in nodes if n is not top), key=lambda n: n.start_us)
            assert len({n.start_us for n in steps}) == len(steps)  # start order is never a tie
            assert all(top.start_us <= n.start_us and n.end_us <= top.end_us for n in steps)
            assert dt.datetime.fromtimestamp(top.end_us / 1e6, dt.UTC).date().isoformat() == date
            shape = f"{top.name}: " + " > ".join(n.name for n in steps)
            found[shape] += 1
            sequential[shape].add(all(b.start_us >= a.end_us for a, b in itertools.pairwise(steps)))
            durations = {n.name: n.end_us - n.start_us for n in steps}
            slowest = max(steps, key=lambda n: n.end_us - n.start_us)
            assert sum(d == durations[slowest.name] for d in (n.end_us - n.start_us for n in steps)) == 1
            slow[shape] += slowest.name == truth[shape]["slow_step"]
            for n in nodes:
                c = n.call
                if c is None:  # a span that is no call: the service's, naming the trace's tenant
                    assert set(n.resource) == {"service.name", "service.instance.id", "tenant.id"}
                    assert n.resource["tenant.id"] == next(m.call["tenant_id"] for m in nodes if m.call)
                    continue
                assert c["status_code"] == 200 and c["attempt"] == 1 and "retry_of" not in c
                assert ("model" in c) == ("input_tokens" in c) == (c["operation"] in ("chat", "rerank"))
                for key in ("input_tokens", "output_tokens"):
                    tokens[shape, key] += c.get(key, 0)
            assert len({m.call["tenant_id"] for m in nodes if m.call}) == 1
            assert len({m.call.get("user_id") for m in nodes if m.call}) == 1
        assert found == {s: p["traces"] for s, p in truth.items()}
        for shape, p in truth.items():
            assert p["steps"] == shape.count(" > ") + 1
            assert sequential[shape] == {p["sequential"]}, shape
            assert slow[shape] == p["slow_traces"], shape  # the planted slow step is the slowest exactly there
            assert (
                tokens[shape, "input_tokens"] == p["input_tokens"]
                and tokens[shape, "output_tokens"] == p["output_tokens"]
            )
        rag = truth["rag.query: retrieve > rerank > chat"]
        assert rag["sequential"]
        if date == list(manifest["days"])[1]:  # a slow-retrieval day: retrieve is the slowest step of most traces
            assert rag["slow_step"] == "retrieve" and rag["traces"] / 2 < rag["slow_traces"] < rag["traces"]
        else:  # chat is the slowest step of every trace
            assert (rag["slow_step"], rag["slow_traces"]) == (None, 0)
        assert not truth["invoke_agent: chat > execute_tool > execute_tool > chat"]["sequential"]
        assert truth["invoke_agent: chat > execute_tool > chat"]["sequential"]


def test_only_workflow_calls_carry_span_ids(generated: tuple[Path, dict]) -> None:
    """Retry chains share a trace id but carry no span id: a multi-call trace is a workflow."""
    root, manifest = generated
    for date in manifest["days"]:
        hourly = (root / "requests" / f"date={date}").glob("hour=*/*.jsonl.gz")
        assert not any(b'"span_id"' in gzip.decompress(p.read_bytes()) for p in hourly)
        multi = Counter(n.trace for n in _nodes(root, date) if n.call is not None)
        traces = sum(p["traces"] for p in manifest["planted"]["workflows"] if p["event_date"] == date)
        assert len(multi) == traces and min(multi.values()) >= 2
