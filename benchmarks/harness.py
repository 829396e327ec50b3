"""What a benchmark returns, and the runner behind ``make bench``.

A benchmark is a module ``benchmarks/bench_*.py`` with ``run(workdir: Path) ->
list[Measurement]``. The runner calls each one in a fresh temporary folder, prints one
table (metric, value, baseline, ratio) and writes every measurement as JSON.

``--scale`` (``STRATA_BENCH_SCALE``, default 1) sizes every benchmark by that fraction, each
size no smaller than the least at which the benchmark still runs every step (:func:`scaled`):
``--scale 0`` is the smoke run of the test suite, which checks that each benchmark runs to the
end; below 1 the targets are not judged (the ratios of a small run say nothing).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

_Size = TypeVar("_Size", int, float)
SCALE_VARIABLE = "STRATA_BENCH_SCALE"


def scale() -> float:
    """The fraction of full size this run measures (``STRATA_BENCH_SCALE``, default 1)."""
    value = float(os.environ.get(SCALE_VARIABLE, "1"))
    if value < 0:
        raise SystemExit(f"{SCALE_VARIABLE} must be 0 or more, not {value:g}")
    return value


def scaled(full: _Size, least: _Size) -> _Size:
    """``full`` (a row count, a duration) at this run's scale, never below ``least``: the smallest
    size at which the benchmark still takes every step it takes at full size."""
    return max(least, type(full)(full * scale()))


@dataclass(frozen=True)
class Measurement:
    """One metric of our code beside the same metric of a named baseline, same run."""

    metric: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    higher_is_better: bool = True
    target_ratio: float | None = None

    @property
    def ratio(self) -> float:
        """How many times better than the baseline (> 1 is better, whatever the unit)."""
        if self.higher_is_better:
            return self.value / self.baseline_value if self.baseline_value else float("inf")
        return self.baseline_value / self.value if self.value else float("inf")

    @property
    def meets_target(self) -> bool | None:
        return None if self.target_ratio is None else self.ratio >= self.target_ratio


def discover(names: list[str] | None) -> list[str]:
    """Module names of the benchmarks to run (all ``bench_*.py`` when none are named)."""
    found = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    if not names:
        return found
    unknown = [n for n in names if f"bench_{n}" not in found and n not in found]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; available: {found}")
    return [n if n.startswith("bench_") else f"bench_{n}" for n in names]


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:,.3g} {unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run Strata benchmarks against their baselines.")
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results.json"))
    parser.add_argument(
        "--scale", type=float, help=f"fraction of full size (default ${SCALE_VARIABLE}, else 1); 0: the smallest"
    )
    args = parser.parse_args(argv)
    if args.scale is not None:  # before the benchmarks are imported: their sizes are set then
        os.environ[SCALE_VARIABLE] = repr(args.scale)
    judged = scale() >= 1
    console = Console(width=max(140, Console().width))
    results: list[dict] = []
    table = Table(title="Strata benchmarks")
    for col in ("benchmark", "metric", "value", "baseline", "baseline value", "ratio", "target"):
        table.add_column(col, justify="right" if "value" in col or col in ("ratio", "target") else "left")
    for name in discover(args.names):
        module = importlib.import_module(f"benchmarks.{name}")
        console.print(f"[bold]running[/] {name} …")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"strata-{name}-") as tmp:
            measurements: list[Measurement] = module.run(Path(tmp))
        for m in measurements:
            verdict = ""
            if m.target_ratio is not None and judged:
                verdict = f"≥{m.target_ratio:g}× " + ("✓" if m.meets_target else "✗")
            table.add_row(
                name,
                m.metric,
                _fmt(m.value, m.unit),
                m.baseline,
                _fmt(m.baseline_value, m.unit),
                f"{m.ratio:.2f}×",
                verdict,
            )
            results.append({"benchmark": name, **asdict(m), "ratio": m.ratio, "meets_target": m.meets_target})
        console.print(f"  done in {time.perf_counter() - started:.1f}s")
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"python": sys.version.split()[0], "machine": platform.machine(), "results": results}, indent=2)
    )
    console.print(f"results written to {args.out}")
    if not judged:
        console.print(f"scale {scale():g}: every benchmark ran to the end; targets not judged")
        return 0
    return 0 if all(r["meets_target"] is not False for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
