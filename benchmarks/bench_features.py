"""Feature materialization and lookups against Feast's own, same run (``make bench BENCH=features``).

DWS rows of a 20-feature view (a benchmark contract cut from ``dws.user_features``: the first
20 feature columns) are synthesized for 100,000 and 1,000,000 entities. Every measurement that
holds memory runs in its own process, so its peak RSS is that process's alone.

- materialize 100k × 20 into SQLite: ours vs Feast's ``materialize`` on the same Delta rows, and
  vs a bare ``executemany`` of the same key/value rows into Feast's table (one transaction);
- the same into Redis (ours pipelined) vs Feast's;
- applying the definitions again (a no-op, target < 1 s) against the first apply;
- ours at 1M × 20: peak RSS (flat: against ours at 100k), and Feast's 1M under a memory cap;
- lookups in-process (1 entity × 20, 100 × 20: our batched reader vs the Feast SDK), and over
  HTTP (10,000 sequential requests: ``strata features serve`` vs Feast's default ``feast serve``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.harness import Measurement, scaled

DAY = dt.date(2026, 3, 2)
START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 3, 4, tzinfo=dt.UTC)
VIEW = "bench_features"
FEATURES = 20
RATE = "entities/s"
SMALL, LARGE = scaled(100_000, 1_000), scaled(1_000_000, 2_000)
#: Lookups timed in-process (each way), and sequential HTTP requests (each server).
LOOKUPS, HTTP_REQUESTS = scaled(2_000, 20), scaled(10_000, 50)
#: Feast's 1M run is capped at this much address space (its 100k run peaks near 2 GB).
FEAST_CAP_BYTES = 6 * 1024**3
KEY = "benchmark-only-key-0123456789"


def _contract(folder: Path) -> None:
    """``dws.bench_features``: ``dws.user_features`` cut to its key, times and first 20 features."""
    from contracts.loader import CONTRACTS_DIR

    doc = yaml.safe_load((CONTRACTS_DIR / "dws.user_features.yaml").read_text())
    doc["id"], doc["name"] = "dws_bench_features", "dws.bench_features"
    schema = doc["schema"][0]
    schema["name"], schema["physicalName"] = "bench_features", "dws.bench_features"
    keep = {"user_pseudonym", "feature_ts", "event_date"}
    props, n = [], 0
    for p in schema["properties"]:
        if p["name"] in keep or n < FEATURES:
            n += p["name"] not in keep
            props.append(p)
    schema["properties"] = props
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dws.bench_features.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _env(workdir: Path, home: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "STRATA_HOME": str(workdir / home),
        "STRATA_LAKE_URI": str(workdir / f"lake-{home}"),
        "STRATA_PSEUDONYM_KEY": KEY,
        "STRATA_CONTRACTS_PATH": str(workdir / "contracts"),
        "TZ": "UTC",
        **extra,
    }


def _child(workdir: Path, env: dict[str, str], *args: str, cap: int | None = None) -> tuple[dict, float, int]:
    """Run one measurement in a child process: (its JSON answer, its peak RSS in MB, its exit code).
    The peak is the child's own ``VmHWM``; a child killed before it could say falls back to ``ru_maxrss``."""

    def limit() -> None:
        if cap:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with open(workdir / "child.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_features", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=limit,
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    answer = json.loads(lines[-1]) if lines else {}
    return answer, answer.get("hwm_mb", usage.ru_maxrss / 1024), proc.returncode


# ---------------------------------------------------------------- the child's side


def _settings():
    from warehouse.settings import load_settings

    return load_settings()


def child_lake(n: int) -> dict:
    from benchmarks.synthetic import feature_rows, pseudonyms
    from warehouse.storage.lake import Lake
    from warehouse.storage.publish import publish
    from warehouse.tables import table

    lake = Lake(_settings())
    source = table("dws.bench_features")
    for start in range(0, n, 250_000):  # in slices: the generator holds a slice at a time
        keys = pseudonyms(min(250_000, n - start), seed=start + 1)
        rows = feature_rows(source, keys, DAY, seed=start + 2)
        publish(
            lake,
            source,
            rows,
            partitions=[{"event_date": DAY}],
            mode="replace_partitions" if start == 0 else "append",
            expectations=False,
            checked=True,
        )
    return {"rows": n}


def child_ours() -> dict:
    """Our materialize, after the definitions are applied and applied again (a no-op), each timed."""
    import feast  # noqa: F401  (imported first: the applies are timed, not the import)

    from features.materialize import materialize
    from features.store import applied_store

    settings = _settings()
    started = time.perf_counter()
    applied_store(settings)
    apply_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _, applied_again = applied_store(settings)
    again_seconds = time.perf_counter() - started
    started = time.perf_counter()
    report = materialize(settings)
    seconds = time.perf_counter() - started
    run = next(v for v in report.views if v.view == VIEW)
    return {
        "seconds": seconds,
        "entities": run.entities,
        "values": run.values_written,
        "apply_seconds": apply_seconds,
        "apply_again_seconds": again_seconds,
        "applied_again": applied_again,
    }


def child_feast() -> dict:
    from features.store import applied_store

    store, _ = applied_store(_settings())
    started = time.perf_counter()
    store.materialize(START, END, feature_views=[VIEW])
    return {"seconds": time.perf_counter() - started}


def child_bare(source_db: str) -> dict:
    """The SQLite limit: the rows our writer wrote, inserted again with one ``executemany``."""
    import sqlite3

    from features.online_store import connect_sqlite
    from features.store import applied_store, sqlite_path

    settings = _settings()
    applied_store(settings)
    with sqlite3.connect(source_db) as con:
        rows = con.execute(
            f"SELECT entity_key, feature_name, value, value_text, event_ts FROM strata_{VIEW} ORDER BY rowid"
        ).fetchall()
    target = connect_sqlite(sqlite_path(settings))
    started = time.perf_counter()
    with target:
        target.executemany(
            f"INSERT INTO strata_{VIEW} (entity_key, feature_name, value, value_text, event_ts, "
            "created_ts) VALUES (?, ?, ?, ?, ?, NULL) ON CONFLICT(entity_key, feature_name) DO UPDATE "
            "SET value = excluded.value, value_text = excluded.value_text, event_ts = excluded.event_ts",
            rows,
        )
    return {"seconds": time.perf_counter() - started, "rows": len(rows)}


def child_lookups(repeats: int = LOOKUPS) -> dict:
    import random

    import numpy as np

    from features.online import reader, views_of
    from features.store import applied_store

    settings = _settings()
    store, _ = applied_store(settings)
    view = views_of(VIEW)[0]
    keys = [
        k
        for (k,) in __import__("sqlite3")
        .connect(str(settings.feast_dir / "online_store.db"))
        .execute(f"SELECT DISTINCT substr(entity_key, 35) FROM strata_{VIEW} LIMIT 20000")
    ]
    keys = [k.decode() for k in keys]
    rng = random.Random(1)
    refs = [f"{VIEW}:{f}" for f in view.features]

    def timed(fn, n: int) -> list[float]:
        out = []
        for _ in range(repeats):
            batch = rng.sample(keys, n)
            t = time.perf_counter()
            fn(batch)
            out.append(time.perf_counter() - t)
        return out

    answer = {}
    for n in (1, 100):
        ours = timed(lambda b: reader(settings).read(view, b), n)
        sdk = timed(
            lambda b: store.get_online_features(features=refs, entity_rows=[{view.key: k} for k in b]).to_dict(), n
        )
        for name, samples in (("ours", ours), ("sdk", sdk)):
            answer[f"{name}_{n}"] = [float(np.percentile(samples, 50)) * 1e3, float(np.percentile(samples, 99)) * 1e3]
    return answer


def child_http(ports: list[int], requests: int = HTTP_REQUESTS) -> dict:
    """``requests`` sequential lookups of one entity against each server, interleaved (A, B, A, B …)
    so both see the same machine; a dropped connection is reopened and its time counts."""
    import http.client
    import sqlite3

    import numpy as np

    from features.online import views_of

    settings = _settings()
    view = views_of(VIEW)[0]
    keys = [
        k.decode()
        for (k,) in sqlite3.connect(str(settings.feast_dir / "online_store.db")).execute(
            f"SELECT DISTINCT substr(entity_key, 35) FROM strata_{VIEW} LIMIT 10000"
        )
    ]
    refs = [f"{VIEW}:{f}" for f in view.features]
    connections = {}
    for port in ports:
        deadline = time.monotonic() + 90
        while True:
            try:
                con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                con.request("GET", "/health")
                con.getresponse().read()
                connections[port] = con
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    samples: dict[int, list[float]] = {port: [] for port in ports}
    reconnects = dict.fromkeys(ports, 0)
    import gc

    gc.disable()  # the client's own collections would land on either server's numbers
    for i in range(-20, requests):  # 20 warm-up rounds (first requests load what a server loads lazily)
        body = json.dumps({"features": refs, "entities": {view.key: [keys[i % len(keys)]]}})
        for port in ports:
            t = time.perf_counter()
            for _ in range(3):  # a server that restarts its worker drops the connection
                try:
                    connections[port].request(
                        "POST", "/get-online-features", body, {"Content-Type": "application/json"}
                    )
                    response = connections[port].getresponse()
                    data = response.read()
                    break
                except (http.client.HTTPException, ConnectionError):
                    connections[port].close()
                    connections[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    reconnects[port] += 1
            if i >= 0:
                samples[port].append(time.perf_counter() - t)
            assert response.status == 200, data[:200]
    return {
        str(port): {
            "p50": float(np.percentile(samples[port], 50)) * 1e3,
            "p99": float(np.percentile(samples[port], 99)) * 1e3,
            "max": max(samples[port]) * 1e3,
            "over_50ms": sum(x > 0.05 for x in samples[port]),
            "reconnects": reconnects[port],
        }
        for port in ports
    }


# ---------------------------------------------------------------- the parent's side


def _serve(workdir: Path, env: dict[str, str], ours: bool, port: int) -> subprocess.Popen:
    from features.store import feast_dir  # noqa: F401  (the config is already generated by the children)

    bin_dir = Path(sys.executable).parent
    if ours:
        command = [str(bin_dir / "strata"), "features", "serve", "--port", str(port)]
    else:
        command = [
            str(bin_dir / "feast"),
            "-c",
            str(Path(env["STRATA_HOME"]) / "feast"),
            "serve",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "serve.log", "ab"),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class _Shown(list):
    """Measurements, each printed as it is added (a later failure keeps the earlier numbers)."""

    def append(self, m: Measurement) -> None:
        print(
            f"  {m.metric}: {m.value:,.3f} {m.unit} vs {m.baseline} {m.baseline_value:,.3f} ({m.ratio:.2f}×)",
            flush=True,
        )
        super().append(m)

    def __iadd__(self, items: list[Measurement]) -> _Shown:  # type: ignore[override]
        for m in items:
            self.append(m)
        return self


def run(workdir: Path) -> list[Measurement]:
    _contract(workdir / "contracts")
    # 100k: one lake, read by every writer (each home has its own online store).
    small = {name: _env(workdir, name) for name in ("ours", "feast", "bare")}
    for env in small.values():
        env["STRATA_LAKE_URI"] = str(workdir / "lake-100k")
    out: list[Measurement] = _Shown()
    measured, ours = _materialize_sqlite(workdir, small)
    out += measured
    out += _materialize_redis(workdir, small)
    out += _lookups(workdir, small["ours"])
    out += _http(workdir, small["ours"])
    large = _env(workdir, "ours-1m")
    measured, big = _materialize_large(workdir, large, ours)
    out += measured
    out.append(_feast_large(workdir, large, big))
    return out


@dataclass(frozen=True)
class _Materialized:
    """One of our materializations: its time and its child's peak RSS."""

    seconds: float
    rss_mb: float


def _materialize_sqlite(workdir: Path, small: dict[str, dict[str, str]]) -> tuple[list[Measurement], _Materialized]:
    """100k × 20 into SQLite: ours against Feast's and a bare ``executemany`` of the rows ours wrote."""
    _child(workdir, small["ours"], "lake", str(SMALL))
    ours, ours_rss, _ = _child(workdir, small["ours"], "ours")
    feast, feast_rss, _ = _child(workdir, small["feast"], "feast")
    bare, _, _ = _child(workdir, small["bare"], "bare", str(workdir / "ours" / "feast" / "online_store.db"))
    assert ours["values"] == SMALL * FEATURES == bare["rows"], (ours, bare)
    assert not ours["applied_again"], "applying the same definitions again applied them"
    measured = [
        Measurement(
            "materialize 100k×20 → SQLite",
            SMALL / ours["seconds"],
            RATE,
            "Feast materialize",
            SMALL / feast["seconds"],
            target_ratio=2.5,
        ),
        Measurement(
            "materialize 100k×20 → SQLite",
            SMALL / ours["seconds"],
            RATE,
            "bare executemany",
            SMALL / bare["seconds"],
            target_ratio=0.8,
        ),
        Measurement(
            "materialize 100k×20 → SQLite peak RSS",
            ours_rss,
            "MB",
            "Feast materialize",
            feast_rss,
            higher_is_better=False,
        ),
        Measurement(
            "apply the same definitions again, a no-op (target < 1 s)",
            ours["apply_again_seconds"],
            "s",
            "the first apply",
            ours["apply_seconds"],
            higher_is_better=False,
        ),
    ]
    return measured, _Materialized(ours["seconds"], ours_rss)


def _materialize_redis(workdir: Path, small: dict[str, dict[str, str]]) -> list[Measurement]:
    """100k × 20 into Redis (databases 8 and 9, flushed before and after): ours against Feast's."""
    import redis

    redis_url = os.environ.get("STRATA_BENCH_REDIS_URL", "redis://127.0.0.1:6379")
    urls = [f"{redis_url}/8", f"{redis_url}/9"]
    for url in urls:
        redis.Redis.from_url(url).flushdb()
    try:
        ours_r, _, _ = _child(
            workdir,
            {**small["ours"], "STRATA_HOME": str(workdir / "ours-redis"), "STRATA_ONLINE_STORE": urls[0]},
            "ours",
        )
        feast_r, _, _ = _child(
            workdir,
            {**small["feast"], "STRATA_HOME": str(workdir / "feast-redis"), "STRATA_ONLINE_STORE": urls[1]},
            "feast",
        )
    finally:
        for url in urls:
            redis.Redis.from_url(url).flushdb()
    return [
        Measurement(
            "materialize 100k×20 → Redis",
            SMALL / ours_r["seconds"],
            RATE,
            "Feast materialize",
            SMALL / feast_r["seconds"],
            target_ratio=5.0,
        )
    ]


def _lookups(workdir: Path, env: dict[str, str]) -> list[Measurement]:
    """In-process lookups of 1 and 100 entities: our batched reader against the Feast SDK."""
    lookups, _, _ = _child(workdir, env, "lookups")
    return [
        Measurement(
            f"lookup {n}×20 {stat}{target}",
            lookups[f"ours_{n}"][i],
            "ms",
            f"Feast SDK {stat}",
            lookups[f"sdk_{n}"][i],
            higher_is_better=False,
        )
        for n, (i, stat), target in (  # each child's answer is (p50, p99)
            (1, (1, "p99"), " (target < 1 ms)"),
            (1, (0, "p50"), ""),
            (100, (1, "p99"), " (target ≤ 5 ms)"),
            (100, (0, "p50"), ""),
        )
    ]


def _http(workdir: Path, env: dict[str, str]) -> list[Measurement]:
    """Sequential one-entity requests over HTTP: ``strata features serve`` against ``feast serve``."""
    from tests.services import free_port

    ports = {"strata": free_port(), "feast": free_port()}
    servers = [_serve(workdir, env, name == "strata", port) for name, port in ports.items()]
    try:
        answer, _, code = _child(workdir, env, "http", str(ports["strata"]), str(ports["feast"]))
        assert code == 0, (workdir / "child.log").read_text()[-3000:]
    finally:
        for server in servers:
            _stop(server)
    served = {name: answer[str(port)] for name, port in ports.items()}
    print(f"  HTTP: {served}", flush=True)
    return [
        Measurement(
            f"HTTP 1 entity {label}",
            served["strata"][stat],
            "ms",
            "feast serve (defaults)",
            served["feast"][stat],
            higher_is_better=False,
            target_ratio=target_ratio,
        )
        for label, stat, target_ratio in (
            ("p99, 10k requests", "p99", 1.0),
            ("slowest of 10k (target < 50 ms)", "max", None),
            ("p50", "p50", None),
        )
    ]


def _materialize_large(
    workdir: Path, env: dict[str, str], small: _Materialized
) -> tuple[list[Measurement], _Materialized]:
    """Ours at 1M × 20 against ours at 100k: peak RSS (flat) and speed."""
    _child(workdir, env, "lake", str(LARGE))
    big, big_rss, _ = _child(workdir, env, "ours")
    assert big["entities"] == LARGE, big
    measured = [
        Measurement(
            "materialize 1M×20 peak RSS (target < 1.5 GB, flat)",
            big_rss,
            "MB",
            "ours at 100k×20",
            small.rss_mb,
            higher_is_better=False,
        ),
        Measurement(
            "materialize 1M×20 → SQLite", LARGE / big["seconds"], RATE, "ours at 100k×20", SMALL / small.seconds
        ),
    ]
    return measured, _Materialized(big["seconds"], big_rss)


def _feast_large(workdir: Path, env: dict[str, str], ours: _Materialized) -> Measurement:
    """Feast's materialization at 1M × 20 under a memory cap (it may not finish): peak RSS against ours."""
    capped = {**env, "STRATA_HOME": str(workdir / "feast-1m")}
    started = time.perf_counter()
    feast_big, feast_big_rss, code = _child(workdir, capped, "feast", cap=FEAST_CAP_BYTES)
    finished = code == 0 and "seconds" in feast_big
    print(
        f"Feast materialize 1M×20 under a {FEAST_CAP_BYTES / 1024**3:.0f} GB cap: "
        + (
            f"finished in {feast_big['seconds']:.0f}s"
            if finished
            else f"could not finish (exit {code} after {time.perf_counter() - started:.0f}s)"
        )
        + f", peak RSS {feast_big_rss:,.0f} MB"
    )
    return Measurement(
        f"materialize 1M×20 peak RSS vs Feast ({'finished' if finished else 'failed'} "
        f"under a {FEAST_CAP_BYTES / 1024**3:.0f} GB cap)",
        ours.rss_mb,
        "MB",
        "Feast materialize",
        feast_big_rss,
        higher_is_better=False,
    )


def _high_water_mb() -> float:
    """This process's own peak RSS (``VmHWM``; ``ru_maxrss`` would keep the forking parent's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> None:
    mode, *args = argv
    try:
        answer = {
            "lake": lambda: child_lake(int(args[0])),
            "ours": child_ours,
            "feast": child_feast,
            "bare": lambda: child_bare(args[0]),
            "lookups": child_lookups,
            "http": lambda: child_http([int(a) for a in args]),
        }[mode]()
    except MemoryError:
        answer = {"error": "MemoryError"}
    print(json.dumps({**answer, "hwm_mb": _high_water_mb()}), flush=True)
    if "error" in answer:
        raise SystemExit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
