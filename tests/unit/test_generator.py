"""The request-log generator: determinism, manifest = files, faults, realism, arguments.

Every dataset is re-read with nothing but ``gzip`` + ``json`` and recounted, so the
manifest is checked against the bytes on disk, not against the generator's own state.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import hashlib
import io
import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

from contracts.errors import InputError
from synthetic_workload import FAULT_KINDS, generate
from warehouse.sources.canonical import REQUEST_FIELDS

START = dt.date(2024, 2, 28)  # the run crosses a leap day
UTC = dt.UTC
_RID = re.compile(rb'"request_id":"(req_[0-9a-f]{16})"')
REQUIRED = ("request_id", "ts", "tenant_id", "model")
ERROR_STATUS = {
    "invalid_request": {400},
    "rate_limited": {429},
    "oom": {500},
    "upstream_error": {502, 503},
    "timeout": {504},
}


# ---- reading a dataset back with plain gzip + json ------------------------------------


def parse_ts(value: object) -> dt.datetime:
    """A canonical ``ts``: epoch milliseconds (int) or RFC 3339 with an offset."""
    if isinstance(value, int):
        return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=value)
    assert isinstance(value, str), value
    parsed = dt.datetime.fromisoformat(value)
    assert parsed.tzinfo is not None, value
    return parsed.astimezone(UTC)


@dataclass
class Line:
    date: str
    hour: int
    seq: int  # position in the day's files, in file order
    raw: bytes
    kind: str  # "valid" or a fault kind (classified from the bytes alone)
    obj: dict | None = None
    rid: str | None = None


@dataclass
class Dataset:
    root: Path
    manifest: dict
    lines: dict[str, list[Line]] = field(default_factory=dict)  # by file date
    feedback: list[tuple[str, dict]] = field(default_factory=list)  # (file date, event)
    workflow_calls: dict[str, list[dict]] = field(default_factory=dict)  # by file date
    workflow_spans: dict[str, list[dict]] = field(default_factory=dict)  # OTLP exports, by file date

    def valid(self, date: str | None = None) -> list[Line]:
        days = [date] if date else sorted(self.lines)
        return [ln for d in days for ln in self.lines[d] if ln.kind == "valid"]

    def requests(self) -> dict[str, dict]:
        """First occurrence of every valid request id, over all days."""
        out: dict[str, dict] = {}
        for ln in self.valid():
            out.setdefault(ln.rid, ln.obj)
        return out


def classify(raw: bytes) -> tuple[str, dict | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8", None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return "truncated_json", None
    return "parsed", obj


def read_dataset(root: Path) -> Dataset:
    ds = Dataset(root, json.loads((root / "manifest.json").read_text()))
    fault_kind_of = {
        rid: kind
        for day in ds.manifest["days"].values()
        for kind, rids in day["fault_request_ids"].items()
        for rid in rids
    }
    for day_dir in sorted((root / "requests").iterdir()):
        date = day_dir.name.removeprefix("date=")
        seq = 0
        day_lines: list[Line] = []
        stem = f"workflows-{date.replace('-', '')}"
        files = {p.name for p in day_dir.iterdir() if p.is_file()}
        assert files <= {f"{stem}.jsonl.gz", f"{stem}.otlp.json.gz"}, files
        for name, into in ((f"{stem}.jsonl.gz", ds.workflow_calls), (f"{stem}.otlp.json.gz", ds.workflow_spans)):
            lines = gzip.decompress((day_dir / name).read_bytes()).splitlines() if name in files else []
            into[date] = [json.loads(x) for x in lines]
        for hour_dir in sorted(p for p in day_dir.iterdir() if p.is_dir()):
            hour = int(hour_dir.name.removeprefix("hour="))
            files = list(hour_dir.iterdir())
            assert [f.name for f in files] == [f"requests-{date.replace('-', '')}T{hour:02d}.jsonl.gz"]
            with gzip.open(files[0], "rb") as fh:
                for raw in fh:
                    assert raw.endswith(b"\n")
                    kind, obj = classify(raw)
                    m = _RID.search(raw)
                    rid = obj.get("request_id") if obj is not None else (m.group(1).decode() if m else None)
                    if kind == "parsed":
                        kind = fault_kind_of.get(rid, "valid")
                        if kind == "valid" and any(k not in obj for k in REQUIRED):
                            kind = "missing_required"  # the request-id-less ones are not listed by id
                    day_lines.append(Line(date, hour, seq, raw, kind, obj, rid))
                    seq += 1
        ds.lines[date] = day_lines
    for day_dir in sorted((root / "feedback").iterdir()):
        date = day_dir.name.removeprefix("date=")
        with gzip.open(day_dir / f"feedback-{date.replace('-', '')}.jsonl.gz", "rt", encoding="utf-8") as fh:
            ds.feedback += [(date, json.loads(x)) for x in fh]
    return ds


# ---- datasets (generated once per module) ------------------------------------------------


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small")
    generate(out, days=3, requests_per_day=6000, seed=11, start=START, fault_rate=0.02)
    return out


@pytest.fixture(scope="module")
def small(small_dir: Path) -> Dataset:
    return read_dataset(small_dir)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """One busy day for statistical behaviour (load, abusers, cache, storms)."""
    out = tmp_path_factory.mktemp("big")
    generate(out, days=1, requests_per_day=60_000, seed=5, start=dt.date(2024, 6, 1))
    return read_dataset(out)


def _difference(a: Path, b: Path, rel: str) -> str:
    """Where two generated files first differ, line by line (gzip files unpacked): a failure to act on."""

    def lines(root: Path) -> list[bytes]:
        data = (root / rel).read_bytes() if (root / rel).exists() else b""
        return (gzip.decompress(data) if rel.endswith(".gz") and data else data).splitlines()

    x, y = lines(a), lines(b)
    at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return (
        f"{rel}: {len(x)} vs {len(y)} lines, first difference at line {at}: "
        f"{x[at][:160] if at < len(x) else None!r} vs {y[at][:160] if at < len(y) else None!r}"
    )


def file_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ---- determinism --------------------------------------------------------------------------


def test_same_seed_same_bytes_different_seed_different_bytes(small_dir: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate(again, days=3, requests_per_day=6000, seed=11, start=START, fault_rate=0.02)
    first, second = file_hashes(small_dir), file_hashes(again)
    assert first == second, [_difference(small_dir, again, p) for p in sorted(first) if first[p] != second.get(p)]
    assert sum(p.startswith("requests/") for p in first) == 3 * (24 + 2)  # hourly files, a day's workflows
    assert sum(p.startswith("feedback/") for p in first) in (5, 6)  # reviews arrive up to 3 days later
    assert {"prices.csv", "manifest.json"} <= set(first)

    other = tmp_path / "other"
    generate(other, days=3, requests_per_day=6000, seed=12, start=START, fault_rate=0.02)
    third = file_hashes(other)
    request_files = [p for p in first if p.startswith("requests/")]
    assert all(first[p] != third[p] for p in request_files)


def test_gzip_header_has_no_mtime_or_name(small_dir: Path) -> None:
    blob = next((small_dir / "requests").rglob("*.jsonl.gz")).read_bytes()
    assert blob[:3] == b"\x1f\x8b\x08"
    assert blob[3] & 0x08 == 0  # FNAME flag clear
    assert blob[4:8] == b"\0\0\0\0"  # mtime 0


def test_regenerating_into_the_same_folder_replaces_it(tmp_path: Path) -> None:
    generate(tmp_path, days=2, requests_per_day=200, seed=1, start=START)
    generate(tmp_path, days=1, requests_per_day=200, seed=1, start=START)
    days = sorted(p.name for p in (tmp_path / "requests").iterdir())
    assert days == ["date=2024-02-28"]
    foreign = tmp_path / "foreign"
    (foreign / "requests").mkdir(parents=True)
    (foreign / "requests" / "x.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match="no generator manifest"):
        generate(foreign, days=1, requests_per_day=10, seed=1, start=START)


# ---- manifest = files ---------------------------------------------------------------------


def test_manifest_files_match_disk(small: Dataset) -> None:
    m = small.manifest
    listed = {f["path"]: f for f in m["files"]}
    on_disk = {
        p.relative_to(small.root).as_posix() for glob in ("*.jsonl.gz", "*.json.gz") for p in small.root.rglob(glob)
    }
    assert set(listed) == on_disk
    for path, f in listed.items():
        blob = (small.root / path).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == f["sha256"]
        assert gzip.decompress(blob).count(b"\n") == f["lines"]
    for i in range(3):
        date = START + dt.timedelta(days=i)
        hours = sorted(p for p in listed if p.startswith(f"requests/date={date.isoformat()}/hour="))
        assert hours == [
            f"requests/date={date.isoformat()}/hour={h:02d}/requests-{date:%Y%m%d}T{h:02d}.jsonl.gz" for h in range(24)
        ]
    prices = (small.root / "prices.csv").read_bytes()
    assert hashlib.sha256(prices).hexdigest() == m["prices"]["sha256"]
    assert m["seed"] == 11 and m["start"] == START.isoformat() and m["requests_per_day"] == 6000
    assert m["day_count"] == 3 and m["fault_rate"] == 0.02 and m["generator_version"]


def test_manifest_counts_match_the_lines(small: Dataset) -> None:
    m = small.manifest
    assert sorted(m["days"]) == sorted(small.lines)
    for date, day in m["days"].items():
        lines = small.lines[date]
        calls, spans = small.workflow_calls[date], small.workflow_spans[date]
        assert day["lines"] == len(lines) + len(calls) + len(spans) and day["trace_only_lines"] == len(spans)
        valid = [ln for ln in lines if ln.kind == "valid"]
        first: dict[str, Line] = {}
        duplicates = Counter()
        for ln in valid:
            if ln.rid in first:
                assert ln.raw == first[ln.rid].raw  # an exact byte copy ...
                assert ln.seq > first[ln.rid].seq  # ... of an earlier line of the same day
                duplicates[ln.obj["model"]] += 1
            else:
                first[ln.rid] = ln
        assert len(first) == 6000 and day["requests"] == 6000 + len(calls)  # workflow calls come on top
        assert day["duplicates"] == sum(duplicates.values()) == round(0.005 * 6000)
        reqs = [ln.obj for ln in first.values()] + calls
        assert day["retries"] == sum(r["attempt"] > 1 for r in reqs)
        assert day["tenants"] == len({r["tenant_id"] for r in reqs})
        assert day["hours"] == [sum(parse_ts(r["ts"]).hour == h for r in reqs) for h in range(24)]
        by_model: dict[str, list[dict]] = defaultdict(list)
        for r in reqs:
            by_model[r.get("model")].append(r)  # a tool's or an agent's call names none
        for model, stats in day["models"].items():
            rs = by_model.get(model, [])
            assert stats["requests"] == len(rs), model
            assert stats["duplicates"] == duplicates[model], model
            for key in ("input_tokens", "output_tokens", "cached_input_tokens"):
                assert stats[key] == sum(r[key] for r in rs), (model, key)
            assert stats["errors"] == sum(r["status_code"] >= 400 for r in rs)
            assert stats["errors_by_type"] == {
                e: sum(r.get("error_type") == e for r in rs) for e in stats["errors_by_type"]
            }
            assert stats["versions"] == dict(Counter(r["model_version"] for r in rs))
        assert set(by_model) - {None} <= set(day["models"])
        # fault lines: exactly the listed ids, classified from the bytes alone
        kinds = Counter(ln.kind for ln in lines if ln.kind != "valid")
        assert {k: kinds.get(k, 0) for k in FAULT_KINDS} == day["faults"]
        for kind, rids in day["fault_request_ids"].items():
            assert sorted(ln.rid for ln in lines if ln.kind == kind and ln.rid) == rids, kind
        assert len(lines) == 6000 + day["duplicates"] + sum(day["faults"].values())


def test_feedback_matches_manifest_and_requests(small: Dataset) -> None:
    fb = small.manifest["feedback"]
    events = [e for _, e in small.feedback]
    assert fb["lines"] == len(events)
    assert fb["by_kind"] == {k: sum(e["kind"] == k for e in events) for k in fb["by_kind"]}
    assert fb["reviews_abusive"] == sum(e["kind"] == "review" and e["value"] == "abusive" for e in events)
    requests = small.requests()
    for date, e in small.feedback:
        assert set(e) == {"request_id", "ts", "kind", "value", "source"}
        assert e["request_id"] in requests  # feedback is about valid requests only
        arrived = parse_ts(e["ts"])
        assert arrived.date().isoformat() == date  # files are by arrival day
        assert arrived >= parse_ts(requests[e["request_id"]]["ts"])
        assert e["kind"] in ("thumb", "review", "flag")
        assert (
            e["value"]
            in {
                "thumb": {"up", "down"},
                "review": {"abusive", "ok"},
                "flag": {"spam", "abuse", "jailbreak", "pii", "other"},
            }[e["kind"]]
        )
    assert max(date for date, _ in small.feedback) > max(small.lines)  # delayed reviews arrive after the run


# ---- faults ---------------------------------------------------------------------------------


def test_faults_of_every_kind_at_the_requested_rate(small: Dataset) -> None:
    for date, day in small.manifest["days"].items():
        assert sum(day["faults"].values()) == round(0.02 * 6000)
        assert all(day["faults"][k] >= 1 for k in FAULT_KINDS), day["faults"]
        valid_ids = {ln.rid for ln in small.valid()}
        for ln in small.lines[date]:
            if ln.kind == "valid":
                continue
            assert ln.rid is None or ln.rid not in valid_ids  # own, unused request ids
            o = ln.obj
            if ln.kind == "truncated_json":
                assert ln.rid is not None
            elif ln.kind == "wrong_type":
                assert any(isinstance(o.get(k), str) for k in ("input_tokens", "duration_ms", "status_code"))
            elif ln.kind == "missing_required":
                assert any(k not in o for k in REQUIRED)
            elif ln.kind == "negative_duration":
                assert o["duration_ms"] < 0
            elif ln.kind == "far_future_ts":
                assert parse_ts(o["ts"]).year >= START.year + 15
            elif ln.kind == "invalid_utf8":
                assert ln.rid is not None
            elif ln.kind == "oversized_line":
                assert len(ln.raw) > 1 << 20
                assert o["request_id"] == ln.rid


def test_no_faults_without_fault_rate(big: Dataset) -> None:
    day = next(iter(big.manifest["days"].values()))
    assert sum(day["faults"].values()) == 0
    assert all(ln.kind == "valid" for ln in next(iter(big.lines.values())))


# ---- the canonical line ------------------------------------------------------------------------


def test_lines_follow_the_canonical_schema(small: Dataset) -> None:
    allowed = set(REQUEST_FIELDS)  # the generator does not read this list: the check stays independent
    ops = set()
    for ln in small.valid():
        r = ln.obj
        assert set(r) <= allowed, set(r) - allowed
        assert re.fullmatch(r"[0-9a-f]{32}", r["trace_id"])
        assert r["attempt"] >= 1 and isinstance(r["status_code"], int)
        assert all(
            isinstance(r[k], int) and r[k] >= 0 for k in ("input_tokens", "output_tokens", "cached_input_tokens")
        )
        assert r["duration_ms"] >= 0
        stages = [r[k] for k in ("queue_ms", "preprocess_ms", "inference_ms", "postprocess_ms") if k in r]
        assert len(stages) in (0, 4)
        assert all(s >= 0 for s in stages) and sum(stages) <= r["duration_ms"]
        if "ttft_ms" in r:
            assert r["operation"] == "chat" and 0 <= r["ttft_ms"] <= r["duration_ms"]
        assert isinstance(r["attributes"], dict) and all(isinstance(v, str) for v in r["attributes"].values())
        if r["status_code"] == 200:
            assert "error_type" not in r
        else:
            assert r["status_code"] in ERROR_STATUS[r["error_type"]]
        if r["cache_hit"]:
            assert r["cached_input_tokens"] > 0
        ops.add(r["operation"])
        # the instant is in the file's UTC day and hour
        ts = parse_ts(r["ts"])
        assert ts.date().isoformat() == ln.date
    assert ops == {"chat", "completion", "embeddings", "rerank", "classify", "detect", "ocr"}


def test_both_timestamp_formats_with_real_offsets(small: Dataset) -> None:
    raw_ts = [ln.obj["ts"] for ln in small.valid()]
    ints = [t for t in raw_ts if isinstance(t, int)]
    strs = [t for t in raw_ts if isinstance(t, str)]
    assert len(ints) > 500 and len(strs) > 500
    offsets = Counter(t[-6:] if not t.endswith("Z") else "Z" for t in strs)
    assert {"+08:00", "-05:00", "Z"} <= set(offsets)
    fractions = Counter(len(re.search(r"\.(\d+)", t).group(1)) for t in strs)
    assert set(fractions) == {3, 6}
    # a +08:00 line after 16:00 local is the previous UTC day's file? no: the local date differs from the UTC date
    shifted = [t for t in strs if t.endswith("+08:00") and parse_ts(t).date() != dt.date.fromisoformat(t[:10])]
    assert shifted


def test_hourly_files_hold_their_hour(small: Dataset) -> None:
    seen: set[str] = set()
    late = 0
    for ln in small.valid():
        if ln.rid in seen:
            assert parse_ts(ln.obj["ts"]).hour <= ln.hour  # a duplicate arrives later ...
            late += parse_ts(ln.obj["ts"]).hour < ln.hour  # ... sometimes in a later hour's file
            continue
        seen.add(ln.rid)
        assert parse_ts(ln.obj["ts"]).hour == ln.hour
    assert late > 0


# ---- realism --------------------------------------------------------------------------------


def test_gray_release_two_versions_same_day_shifting(small: Dataset) -> None:
    shares = []
    for day in small.manifest["days"].values():
        versions = day["models"]["aurora-chat-70b"]["versions"]
        assert len(versions) == 2 and min(versions.values()) > 0
        shares.append(versions["v3.2"] / sum(versions.values()))
    assert shares[0] < shares[1] < shares[2]
    templates = {ln.obj.get("prompt_template_version") for ln in small.valid() if ln.obj["operation"] == "chat"}
    assert {"chat-tmpl-7", "chat-tmpl-8"} <= templates
    pipelines = {
        ln.obj.get("pipeline_version")
        for ln in small.valid(str(START + dt.timedelta(days=1)))
        if ln.obj["server"].startswith("triton")
    }
    assert pipelines == {"pl-2.3.0", "pl-2.4.0"}  # upgraded mid-run


def test_zipf_tenants_and_users(big: Dataset) -> None:
    reqs = big.requests().values()
    tenants = sorted(Counter(r["tenant_id"] for r in reqs).values(), reverse=True)
    assert 20 <= len(tenants) <= 50
    assert tenants[0] >= 8 * statistics.median(tenants)
    users = sorted(Counter(r["user_id"] for r in reqs if "user_id" in r).values(), reverse=True)
    assert users[0] >= 20 * statistics.median(users)
    assert len({r["api_key_id"] for r in reqs}) > len(tenants)


def test_diurnal_curve_and_load_driven_timeouts(big: Dataset) -> None:
    hours = next(iter(big.manifest["days"].values()))["hours"]
    assert sum(hours) == 60_000 + sum(len(calls) for calls in big.workflow_calls.values()) and min(hours) > 0
    assert max(hours) >= 3 * min(hours)
    reqs = list(big.requests().values())
    by_hour: dict[int, list[dict]] = defaultdict(list)
    for r in reqs:
        by_hour[parse_ts(r["ts"]).hour].append(r)
    ranked = sorted(range(24), key=lambda h: len(by_hour[h]))

    def timeout_rate(hs: list[int]) -> float:
        rs = [r for h in hs for r in by_hour[h]]
        return sum(r.get("error_type") == "timeout" for r in rs) / len(rs)

    assert timeout_rate(ranked[-6:]) > 3 * timeout_rate(ranked[:6])
    types = Counter(r.get("error_type") for r in reqs)
    assert all(types[e] > 0 for e in ERROR_STATUS), types


def test_retries_chain_to_their_first_attempt(big: Dataset) -> None:
    reqs = big.requests()
    retries = [r for r in reqs.values() if r["attempt"] > 1]
    assert retries
    for r in retries:
        first = reqs[r["retry_of"]]
        assert first["attempt"] == 1 and "retry_of" not in first
        assert parse_ts(first["ts"]) < parse_ts(r["ts"])
        for k in ("tenant_id", "model", "trace_id", "input_tokens"):
            assert first[k] == r[k]
    attempts = defaultdict(list)
    for r in retries:
        attempts[r["retry_of"]].append(r["attempt"])
    for a in attempts.values():
        assert sorted(a) == list(range(2, len(a) + 2))


def test_retry_storm_is_visible(big: Dataset) -> None:
    (storm,) = big.manifest["retry_storms"]
    s, e = parse_ts(storm["start"]), parse_ts(storm["end"])
    tenant_retries = [
        parse_ts(r["ts"]) for r in big.requests().values() if r["tenant_id"] == storm["tenant_id"] and r["attempt"] > 1
    ]
    inside = sum(s <= t < e + dt.timedelta(minutes=1) for t in tenant_retries)
    minutes = (e - s).total_seconds() / 60
    assert inside / minutes > 10 * (len(tenant_retries) - inside) / (24 * 60 - minutes)


def test_cache_hits_are_faster(big: Dataset) -> None:
    rows = [
        r
        for r in big.requests().values()
        if r["model"] == "aurora-chat-70b" and r["status_code"] == 200 and "ttft_ms" in r
    ]
    hit = [r["ttft_ms"] for r in rows if r["cache_hit"]]
    miss = [r["ttft_ms"] for r in rows if not r["cache_hit"]]
    assert len(hit) > 100 and statistics.median(hit) < 0.8 * statistics.median(miss)


def test_abusive_users_behave_differently_and_are_reviewed(big: Dataset) -> None:
    abusers = set(big.manifest["abusive_user_ids"])
    users = {r.get("user_id") for r in big.requests().values()} - {None}
    assert 0.01 <= len(abusers) / len(users) <= 0.03
    reqs = big.requests()
    ab = [r for r in reqs.values() if r.get("user_id") in abusers]
    normal = [r for r in reqs.values() if r.get("user_id") not in abusers]

    def share(rs: list[dict], pred) -> float:
        return sum(map(pred, rs)) / len(rs)

    per_user = Counter(r.get("user_id") for r in normal if "user_id" in r)
    per_abuser = len(ab) / len(abusers)  # much higher rates than the typical (and the average) user
    assert per_abuser > 10 * statistics.median(per_user.values())
    assert per_abuser > 3 * statistics.mean(per_user.values())
    rejected = lambda r: r["status_code"] in (400, 429)  # noqa: E731
    assert share(ab, rejected) > 5 * share(normal, rejected)
    assert statistics.median(
        r["input_tokens"] / max(r["output_tokens"], 1) for r in ab if r["status_code"] == 200
    ) > 10 * statistics.median(
        r["input_tokens"] / max(r["output_tokens"], 1)
        for r in normal
        if r["status_code"] == 200 and r["output_tokens"] > 0
    )
    odd = lambda r: 6 <= parse_ts(r["ts"]).hour < 12  # noqa: E731 - the service's quiet hours
    assert share(ab, odd) > 2 * share(normal, odd)
    # reviews: every active abuser is confirmed abusive 1–3 days later; nobody else is
    reviewed: dict[str, set[str]] = defaultdict(set)
    for _, e in big.feedback:
        if e["kind"] == "review":
            r = reqs[e["request_id"]]
            delay = parse_ts(e["ts"]) - parse_ts(r["ts"])
            assert dt.timedelta(days=1) <= delay <= dt.timedelta(days=3)
            reviewed[e["value"]].add(r.get("user_id"))
    assert {r["user_id"] for r in ab} == reviewed["abusive"]
    assert reviewed["ok"] and not reviewed["ok"] & abusers
    flagged_normal = {reqs[e["request_id"]].get("user_id") for _, e in big.feedback if e["kind"] == "flag"} - abusers
    assert flagged_normal  # false flags exist
    thumbs = Counter(e["value"] for _, e in big.feedback if e["kind"] == "thumb")
    assert thumbs["up"] > thumbs["down"] > 0


def test_prices_csv(small: Dataset) -> None:
    text = (small.root / "prices.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = "model,effective_from,input_price_per_1k,output_price_per_1k,cached_input_price_per_1k"
    assert text.splitlines()[0] == header
    models = {m for day in small.manifest["days"].values() for m in day["models"]}
    assert len(models) >= 5
    for model in models:
        dates = [dt.date.fromisoformat(r["effective_from"]) for r in rows if r["model"] == model]
        assert min(dates) <= START, model
    changes = [r for r in rows if START < dt.date.fromisoformat(r["effective_from"]) < START + dt.timedelta(days=3)]
    assert changes
    assert all(float(r[k]) >= 0 for r in rows for k in r if k.endswith("_per_1k"))


def test_quotas_csv(small: Dataset) -> None:
    blob = (small.root / "quotas.csv").read_bytes()
    assert hashlib.sha256(blob).hexdigest() == small.manifest["quotas"]["sha256"]
    text = blob.decode()
    assert text.splitlines()[0] == "tenant_id,effective_from,daily_request_quota,daily_token_quota"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == small.manifest["quotas"]["rows"]
    tenants = {r["tenant_id"] for r in rows}
    assert 0.5 * small.manifest["population"]["tenants"] <= len(tenants) < small.manifest["population"]["tenants"]
    assert all(int(r["daily_request_quota"]) >= 100 and int(r["daily_token_quota"]) >= 10_000 for r in rows)
    raised = [r for r in rows if dt.date.fromisoformat(r["effective_from"]) >= START]
    assert len(raised) == 1  # the busiest tenant's quotas are raised mid-run: the quota in effect changes
    assert raised[0]["effective_from"] == (START + dt.timedelta(days=1)).isoformat()
    before = next(r for r in rows if r["tenant_id"] == raised[0]["tenant_id"] and r is not raised[0])
    assert int(raised[0]["daily_request_quota"]) > int(before["daily_request_quota"])


# ---- arguments and progress ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"days": 0}, "days"),
        ({"requests_per_day": 0}, "requests_per_day"),
        ({"fault_rate": -0.01}, "fault_rate"),
        ({"fault_rate": 0.51}, "fault_rate"),
        ({"seed": -1}, "seed"),
        ({"start": "2024-01-01"}, "start"),
        ({"days": 1.5}, "days"),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path: Path, kwargs: dict, message: str) -> None:
    args = {"days": 1, "requests_per_day": 10, "seed": 1, "start": START, "fault_rate": 0.0} | kwargs
    with pytest.raises(InputError, match=message):
        generate(tmp_path / "x", **args)
    assert not (tmp_path / "x").exists()


def test_progress_reports_every_file_of_requests(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    m = generate(
        tmp_path,
        days=2,
        requests_per_day=500,
        seed=3,
        start=START,
        fault_rate=0.1,
        progress=lambda _what, done, total: calls.append((done, total)),
    )
    total = sum(d["lines"] for d in m["days"].values())
    assert len(calls) == 2 * (24 + 2)  # the hourly files and each day's two of workflows
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert calls[-1] == (total, total)


def test_tiny_scale_still_exact(tmp_path: Path) -> None:
    m = generate(tmp_path, days=1, requests_per_day=1, seed=0, start=START, fault_rate=0.5)
    day = m["days"][START.isoformat()]
    assert day["requests"] == 1 and day["lines"] == 2 and sum(day["faults"].values()) == 1
    assert sum(f["lines"] for f in m["files"] if f["path"].startswith("requests/")) == 2


# ---- planted operator patterns (manifest["planted"]) -------------------------------------------


def request_frame(ds: Dataset) -> pl.DataFrame:
    """The distinct valid requests as a polars frame (ts in UTC)."""
    rows = list(ds.requests().values())
    keys = ("request_id", "attempt", "retry_of", "tenant_id", "model", "server", "server_instance", "status_code")
    frame = pl.DataFrame({k: [r.get(k) for r in rows] for k in keys}).with_columns(
        ts=pl.Series([parse_ts(r["ts"]) for r in rows]),
        duration_ms=pl.Series([float(r["duration_ms"]) for r in rows]),
        input_tokens=pl.Series([r["input_tokens"] for r in rows]),
    )
    frame = frame.with_columns(event_date=pl.col("ts").dt.date().cast(pl.Utf8))
    # latency against the model's median that day (models differ by orders of magnitude)
    typical = pl.col("duration_ms").median().over("event_date", "model")
    return frame.with_columns(slowdown=pl.col("duration_ms") / typical).sort("ts")


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def check_instances(frame: pl.DataFrame, planted: dict) -> None:
    """Every line names its server's instance; each planted start's first requests are slowed."""
    assert frame["server_instance"].null_count() == 0
    assert (frame["server_instance"].str.slice(0, frame["server"].str.len_chars()) == frame["server"]).all()
    per_instance = frame.group_by("server_instance").agg(pl.col("server").n_unique())
    assert (per_instance["server"] == 1).all()
    days = sorted(frame["event_date"].unique())
    for s in planted["instance_starts"]:
        assert utc(s["started_at"]) >= utc(f"{days[0]}T02:00:00+00:00")
        assert 5 <= s["warmup_factor"] <= 10 and s["kind"] in ("deploy", "scale_up", "restart")
        served = frame.filter(pl.col("server_instance") == s["server_instance"])
        assert served["ts"][0] == utc(s["first_request_at"]) >= utc(s["started_at"])
        started = utc(s["started_at"])
        shard_end = started.replace(hour=started.hour // 3 * 3 + 3 if started.hour < 21 else 0, minute=0, second=0)
        shard_end += dt.timedelta(days=started.hour >= 21, microseconds=-started.microsecond)
        # the first 50 the instance serves, those within the 3-hour block of its start (drawn alone)
        assert s["warmup_requests"] == min(50, served.filter(pl.col("ts") < shard_end).height)
        before = frame.filter((pl.col("server") == s["server"]) & (pl.col("ts") < utc(s["started_at"])))
        assert before.height == 0 or before["server_instance"][-1] != s["server_instance"]
        warm, later = served.head(s["warmup_requests"]), served.slice(s["warmup_requests"], 200)
        if s["warmup_requests"] >= 30 and later.height >= 30:
            assert warm["slowdown"].median() >= 4 * later["slowdown"].median(), s
    # servers without a start keep one instance
    started = {s["server"] for s in planted["instance_starts"]}
    steady = frame.filter(~pl.col("server").is_in(started)).group_by("server").agg(pl.col("server_instance").n_unique())
    assert (steady["server_instance"] == 1).all()


def check_retry_policy(frame: pl.DataFrame, planted: dict) -> None:
    """Chains longer than 3 attempts and retries of a 400 occur only where planted, as counted."""
    first = frame.select(pl.col("request_id").alias("retry_of"), pl.col("status_code").alias("first_status"))
    retries = frame.filter(pl.col("attempt") > 1).join(first, on="retry_of")
    keys = ["tenant_id", "event_date", "model"]
    of_400 = retries.filter(pl.col("first_status") == 400).group_by(keys).agg(retries=pl.len())
    assert sorted(of_400.to_dicts(), key=str) == sorted(planted["non_retryable_retries"], key=str)
    assert set(retries.filter(pl.col("first_status") == 400)["status_code"]) <= {400}
    long = (
        frame.filter(pl.col("attempt") > 3)
        .group_by(keys)
        .agg(chains=(pl.col("attempt") == 4).sum().cast(pl.Int64), longest=pl.col("attempt").max())
    )
    assert sorted(long.to_dicts(), key=str) == sorted(planted["unbounded_chains"], key=str)
    for c in planted["unbounded_chains"]:
        assert 5 <= c["longest"] <= 8


def check_peaks(frame: pl.DataFrame, planted: dict) -> None:
    """Each day's peak is its model's busiest 10 minutes (and minutes) of first attempts, ×3–4 the
    30 minutes around (at a busy day's scale: small counts round coarsely)."""
    firsts = frame.filter(pl.col("attempt") == 1)
    for p in planted["peaks"]:
        start, end = utc(p["start"]), utc(p["end"])
        assert start.second == start.microsecond == 0 and end - start == dt.timedelta(minutes=10)
        ts = firsts.filter((pl.col("model") == p["model"]) & (pl.col("event_date") == p["event_date"]))["ts"]
        inside = ts.is_between(start, end, closed="left").sum()
        around = ts.is_between(start - dt.timedelta(minutes=30), end + dt.timedelta(minutes=30), closed="left").sum()
        assert p["factor"] == pytest.approx(inside / 10 / ((around - inside) / 60), abs=1e-3)
        assert 3 <= p["factor"] <= 4, p
        minutes = ts.dt.truncate("1m").value_counts().sort("ts").upsample("ts", every="1m").fill_null(0)
        assert inside == minutes["count"].rolling_sum(10).max(), p  # the model's busiest 10 minutes
        near = minutes.filter(pl.col("ts").is_between(start - dt.timedelta(minutes=10), end + dt.timedelta(minutes=10)))
        assert start <= near["ts"][near["count"].arg_max()] < end


def test_planted_instances_retry_policy_and_peaks(small: Dataset) -> None:
    planted = small.manifest["planted"]
    frame = request_frame(small)
    assert {s["kind"] for s in planted["instance_starts"]} == {"deploy", "scale_up", "restart"}
    check_instances(frame, planted)
    check_retry_policy(frame, planted)
    assert planted["non_retryable_retries"] and planted["unbounded_chains"]
    assert len(planted["peaks"]) == 3


def test_planted_peak_is_the_busiest_window(big: Dataset) -> None:
    check_peaks(request_frame(big), big.manifest["planted"])


def check_drift(frame: pl.DataFrame, planted: dict) -> None:
    """The drifting instance slows with its work, to ×2.5–3 by its restart; the next is normal."""
    (d,) = planted["drifting_instances"]
    assert 2.5 <= d["slowdown_before_restart"] <= 3
    day = frame.filter(pl.col("event_date") == d["event_date"])
    start = next(s for s in planted["instance_starts"] if s["server_instance"] == d["server_instance"])
    served = day.filter(pl.col("server_instance") == d["server_instance"]).slice(start["warmup_requests"])
    # in quarters of its requests (a few huge prompts would make a quarter of the tokens)
    quarters = served.group_by(pl.int_range(pl.len()) * 4 // pl.len()).agg(pl.col("slowdown").median())
    medians = quarters.sort("literal")["slowdown"].to_list()
    assert medians[0] < min(medians[1:]) and medians[-1] > max(medians[:-1]), medians
    assert medians[-1] > 1.8 * medians[0], medians
    after = day.filter(pl.col("server_instance") == d["next_instance"]).slice(50)
    assert after["slowdown"].median() < 0.6 * medians[-1]


def check_token_jump(frame: pl.DataFrame, planted: dict) -> None:
    (j,) = planted["token_jumps"]
    daily = (
        frame.filter(pl.col("tenant_id") == j["tenant_id"])
        .group_by("event_date")
        .agg(n=pl.len(), tokens=pl.col("input_tokens").median())
        .sort("event_date")
    )
    jump, usual = (
        daily.filter(pl.col("event_date") == j["event_date"]),
        daily.filter(pl.col("event_date") != j["event_date"]),
    )
    assert jump["tokens"][0] > 2 * usual["tokens"].max()  # ×3, less where prompts hit the context size
    assert abs(jump["n"][0] / usual["n"].mean() - 1) < 0.2


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = tmp_path_factory.mktemp("week")
    generate(out, days=5, requests_per_day=4000, seed=7, start=START, fault_rate=0.01)
    return read_dataset(out)


def test_planted_drift_and_token_jump(week: Dataset) -> None:
    planted = week.manifest["planted"]
    frame = request_frame(week)
    check_drift(frame, planted)
    check_token_jump(frame, planted)
    check_retry_policy(frame, planted)
