"""What the fabric check (``network_check: true``) costs a 2-node step on CPU (gloo), on the local backend.

Runs ``mlrecipe install RELEASE data-prep/data-process -f recipe.yaml`` for a 2-node step whose command is ``true``,
with and without ``network_check: true``, alternating (A B, then B A, ...) after one untimed warm-up of each, each
in its own temporary ``MLRECIPE_HOME``. Prints the median wall time of each, the median of the per-round differences
(the check's cost as the user sees it; target <= 10 s), the check's own time as its nodes report it
(``seconds`` in ``fabric-node-<rank>.json``: torch's import, the gloo rendezvous, the 1/8/64 MiB all-reduces) and
the bus bandwidth measured per size. The script asserts no target (it exits 1 only when a run fails).

Run::

    .venv/bin/python benchmarks/bench_fabric_check.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MLRECIPE = [str(Path(sys.executable).with_name("mlrecipe"))]
RECIPE = """resources: {{nnodes: 2}}
{check}process:
  env: [{{name: OMP_NUM_THREADS, value: "1"}}]
  command: ["true"]
"""


def one_run(check: bool, index: int) -> tuple[float, list[dict]]:
    """Wall seconds of one install, and the fabric figures of its nodes."""
    with tempfile.TemporaryDirectory(prefix="bench-fabric-") as tmp:
        home = Path(tmp) / "home"
        recipe = Path(tmp) / "recipe.yaml"
        recipe.write_text(RECIPE.format(check="network_check: true\n" if check else ""))
        env = {**os.environ, "MLRECIPE_HOME": str(home)}
        release = f"fab{index}"
        start = time.perf_counter()
        done = subprocess.run([*MLRECIPE, "install", release, "data-prep/data-process", "-f", str(recipe)],
                              env=env, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"run failed: {done.stdout}{done.stderr}")
        step = home / "releases" / "local" / "default" / release / "steps" / "data-process"
        figures = [json.loads(p.read_text()) for p in sorted(step.glob("fabric-node-*.json"))]
        return wall, figures


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    one_run(False, 0)
    one_run(True, 0)
    plain, checked, diffs, own, busbw = [], [], [], [], {}
    for i in range(args.runs):
        order = [False, True] if i % 2 == 0 else [True, False]
        walls = {}
        for check in order:
            wall, figures = one_run(check, i + 1)
            walls[check] = wall
            if check:
                own += [f["seconds"] for f in figures]
                for f in figures:
                    for row in f["sizes"]:
                        busbw.setdefault(row["bytes"] >> 20, []).append(row["busbw_gbs"])
        plain.append(walls[False])
        checked.append(walls[True])
        diffs.append(walls[True] - walls[False])
    print(f"runs: {args.runs} per variant, 2 local nodes, gloo on CPU")
    print(f"install without network_check: median {statistics.median(plain):.2f} s")
    print(f"install with network_check:    median {statistics.median(checked):.2f} s")
    print(f"cost (median of per-round differences): {statistics.median(diffs):.2f} s "
          f"(min {min(diffs):.2f}, max {max(diffs):.2f}; target <= 10 s)")
    print(f"check's own time per node: median {statistics.median(own):.2f} s (max {max(own):.2f})")
    for mib, values in sorted(busbw.items()):
        print(f"busbw {mib:>3} MiB: median {statistics.median(values):.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
