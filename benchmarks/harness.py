"""What a benchmark returns, and the runner behind ``make bench``.

A benchmark is a module ``benchmarks/bench_*.py`` with ``run(workdir: Path) ->
list[Measurement]``. The runner calls each one in a fresh temporary folder, prints one
table (metric, value, baseline, ratio) and writes every measurement as JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table


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
    args = parser.parse_args(argv)
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
            verdict = "" if m.target_ratio is None else f"≥{m.target_ratio:g}× " + ("✓" if m.meets_target else "✗")
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
    return 0 if all(r["meets_target"] is not False for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
