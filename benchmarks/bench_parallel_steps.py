"""Two independent steps run side by side (issue 17, point 7): a release with two 10 s steps must take at most
1.2 times a release with one.

Both releases run through the real CLI on the local backend (``mlrecipe run``, a fresh ``MLRECIPE_HOME`` each),
one after the other in this run: ``one`` is a tiny ``prep`` step then one step sleeping 10 s (``time.sleep`` in
Python); ``two`` is the same ``prep`` then two such steps that both depend only on ``prep``. Prints each wall time
and the ratio; exits 1 when the ratio is over the target.

    .venv/bin/python benchmarks/bench_parallel_steps.py [--seconds 10] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.2
STEP = """\
  - name: {name}
    chart: data-prep/data-process
    depends_on: [prep]
    values:
      pvc: []
      process: {{command: [python3, -c, "'import time; time.sleep({seconds})'"]}}
"""
PREP = """\
release: bench-parallel
steps:
  - name: prep
    chart: data-prep/data-process
    values:
      pvc: []
      process: {command: ['true']}
"""


def write_pipeline(directory: Path, names: list[str], seconds: float) -> Path:
    """``prep``, then one sleeping step per name, each depending only on ``prep``."""
    path = directory / f"pipeline-{len(names)}.yaml"
    path.write_text(PREP + "".join(STEP.format(name=n, seconds=seconds) for n in names))
    return path


def run_once(path: Path, home: Path) -> float:
    """Wall seconds of ``mlrecipe run PATH`` with a fresh ``MLRECIPE_HOME``."""
    env = {**os.environ, "MLRECIPE_HOME": str(home)}
    start = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "mlrecipe"), "run", str(path)], env=env,
                          capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mlrecipe run {path} failed:\n{done.stdout}{done.stderr}")
    return took


def main() -> int:
    """Print both wall times and their ratio; exit 1 when the ratio is over the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="How long each step sleeps")
    parser.add_argument("--repeats", type=int, default=1, help="Pairs of runs (medians are reported)")
    args = parser.parse_args()
    one, two = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        single = write_pipeline(root, ["a"], args.seconds)
        double = write_pipeline(root, ["a", "b"], args.seconds)
        for i in range(args.repeats):
            one.append(run_once(single, root / f"home-one-{i}"))
            two.append(run_once(double, root / f"home-two-{i}"))
    one_s, two_s = statistics.median(one), statistics.median(two)
    ratio = two_s / one_s
    print(f"one {args.seconds:.0f} s step (after a tiny prep step): {one_s:.2f} s wall")
    print(f"two independent {args.seconds:.0f} s steps (after the same prep step): {two_s:.2f} s wall")
    print(f"ratio two / one: {ratio:.3f} (target <= {TARGET_RATIO}); os.cpu_count() = {os.cpu_count()}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
