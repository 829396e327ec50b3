"""Request-log generator throughput: ``generate`` vs. a per-line ``json.dumps`` + gzip writer.

Ours: 1 day × 1,000,000 requests with fault_rate 0.01, end to end (drawing, encoding,
gzip, writing hourly files, feedback, manifest), in lines written per second.

Baseline: the straightforward way — build each record as a Python dict with ``random``,
``json.dumps`` it and write it through ``gzip.open`` at the same compression level (1),
one hourly file at a time; measured on a 200,000-line slice (its rate does not depend on
the size). A second row checks ours against the 200k lines/s target.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import random
import time
from pathlib import Path

from benchmarks.harness import Measurement, scaled
from synthetic_workload import generate
from synthetic_workload.writer import GZIP_LEVEL

REQUESTS = scaled(1_000_000, 2_000)
BASELINE_LINES = scaled(200_000, 240)  # 24 hourly files
TARGET = 200_000.0


def _baseline(workdir: Path, lines: int) -> float:
    """Lines/s of a naive generator writing the same kind of lines."""
    rnd = random.Random(7)
    models = [
        ("aurora-chat-70b", "chat", "inhouse"),
        ("gpt-4o-mini", "chat", "azure-openai"),
        ("text-embedding-3-small", "embeddings", "azure-openai"),
        ("bge-reranker-v2", "rerank", "inhouse"),
        ("yolo-det-l", "detect", "inhouse"),
    ]
    start = time.perf_counter()
    per_hour = lines // 24
    base = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    for hour in range(24):
        path = workdir / f"baseline/requests-{hour:02d}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", compresslevel=GZIP_LEVEL) as fh:
            for _ in range(per_hour if hour < 23 else lines - 23 * per_hour):
                model, op, provider = rnd.choice(models)
                queue, pre, inf, post = (
                    rnd.lognormvariate(2, 1),
                    rnd.lognormvariate(1, 0.4),
                    rnd.lognormvariate(6, 1),
                    rnd.lognormvariate(0, 0.5),
                )
                ts = base + dt.timedelta(hours=hour, microseconds=rnd.randrange(3_600_000_000))
                record = {
                    "request_id": f"req_{rnd.getrandbits(64):016x}",
                    "trace_id": f"{rnd.getrandbits(128):032x}",
                    "attempt": 1,
                    "ts": ts.isoformat(timespec="microseconds"),
                    "duration_ms": round(queue + pre + inf + post + 2, 3),
                    "queue_ms": round(queue, 3),
                    "preprocess_ms": round(pre, 3),
                    "inference_ms": round(inf, 3),
                    "postprocess_ms": round(post, 3),
                    "tenant_id": f"tenant-{rnd.randrange(1, 47):03d}",
                    "user_id": f"u_{rnd.getrandbits(40):010x}",
                    "api_key_id": f"ak_{rnd.getrandbits(32):08x}",
                    "operation": op,
                    "model": model,
                    "model_version": "v1",
                    "provider": provider,
                    "server": f"srv-{rnd.randrange(1, 9):02d}",
                    "pipeline_version": "serve-1.8.2",
                    "input_tokens": rnd.randrange(1, 4000),
                    "output_tokens": rnd.randrange(0, 800),
                    "cached_input_tokens": 0,
                    "batch_size": rnd.randrange(1, 33),
                    "status_code": 200,
                    "finish_reason": "stop",
                    "cache_hit": False,
                    "attributes": {"region": "eu-west-1", "client": "python-sdk/1.4.2"},
                }
                fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    return lines / (time.perf_counter() - start)


def run(workdir: Path) -> list[Measurement]:
    """Time ``generate`` at 1M requests/day and the naive baseline, in the same run."""
    started = time.perf_counter()
    manifest = generate(
        workdir / "dataset", days=1, requests_per_day=REQUESTS, seed=1, start=dt.date(2024, 3, 1), fault_rate=0.01
    )
    elapsed = time.perf_counter() - started
    lines = sum(day["lines"] for day in manifest["days"].values())
    ours = lines / elapsed
    baseline = _baseline(workdir, BASELINE_LINES)
    return [
        Measurement(
            metric="generator lines/s",
            value=ours,
            unit="lines/s",
            baseline="json.dumps per line + gzip",
            baseline_value=baseline,
            target_ratio=None,
        ),
        Measurement(
            metric="generator lines/s",
            value=ours,
            unit="lines/s",
            baseline="target 200k lines/s",
            baseline_value=TARGET,
            target_ratio=1.0,
        ),
    ]
