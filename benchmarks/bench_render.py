"""Render time of the mlrecipe charts through the real Helm engine (helm_python).

Renders 7 different charts with their first ci/ scenario, 5 times each, and prints the median
per chart and the total of the medians (chart loading is timed separately: once per process).

    PYTHONPATH=src python benchmarks/bench_render.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from mlrecipe.helm._engine import load_chart
from mlrecipe.helm.render import charts_root, load_values_file, render_chart

CHARTS = [
    "training/pytorchjob-distributed",
    "training/pytorchjob-elastic",
    "training/mpijob",
    "training/raytrain",
    "data-prep/data-process",
    "model-prep/hf-snapshot",
    "serving/triton-inference-server",
]
REPEATS = 5


def _values(name: str) -> dict:
    first = sorted((charts_root() / name / "ci").glob("*-values.yaml"))[0]
    return load_values_file(first)


def main() -> int:
    """Print per-chart load and median render times and the total; exit 1 if the total is >= 1 s."""
    total = 0.0
    print(f"{'chart':40} {'load ms':>8} {'render ms (median of 5)':>24}")
    for name in CHARTS:
        path: Path = charts_root() / name
        values = _values(name)
        start = time.perf_counter()
        load_chart(str(path.resolve()))
        load_ms = (time.perf_counter() - start) * 1000
        samples = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            render_chart(path, values, "bench", "default")
            samples.append(time.perf_counter() - start)
        median = statistics.median(samples)
        total += median
        print(f"{name:40} {load_ms:8.1f} {median * 1000:24.1f}")
    print(f"{'total (7 charts, medians)':40} {'':8} {total * 1000:24.1f}")
    return 0 if total < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
