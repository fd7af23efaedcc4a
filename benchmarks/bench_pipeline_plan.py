"""Planning and validating a 200-step pipeline: a 20 x 10 matrix on a cheap chart (issue 17, point 7).

Times ``load_pipeline`` (parse, validate every expanded step, order them) plus the local backend's capability
check, plan and ``materialize`` of every step (what ``run --dry-run`` prints), in this process: the first
(cold) run and the median of the following ones. Target: at most 1 s. Also the wall time of the whole command
``mlrecipe validate PIPELINE -b local`` (a new process, imports included).

    .venv/bin/python benchmarks/bench_pipeline_plan.py [--repeats 5]
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

PIPELINE = """\
release: bench-sweep
sweep: {rank_by: eval_loss, goal: min}
steps:
  - name: prep
    chart: data-prep/data-process
    values:
      pvc: []
      process: {command: [python3, -c, "'print(1)'"]}
  - name: sweep
    chart: data-prep/data-process
    depends_on: prep
    values:
      pvc: []
      process: {command: [python3, -c, "'print(2)'"]}
    matrix:
      resources.requests.cpu: [%s]
      resources.limits.memory: [%s]
"""
TARGET_S = 1.0


def write_pipeline(directory: Path) -> Path:
    """The pipeline: a data step, then a 20 x 10 matrix (200 steps) that depends on it."""
    cpus = ", ".join(str(n) for n in range(1, 21))
    memory = ", ".join(f"{n}Gi" for n in range(1, 11))
    path = directory / "pipeline.yaml"
    path.write_text(PIPELINE % (cpus, memory))
    return path


def plan_once(path: Path) -> tuple[float, float, int]:
    """Seconds to load and validate, seconds to check + plan + materialize every step, and the step count."""
    from mlrecipe.backends.registry import get_backend
    from mlrecipe.runner.progress import QuietDisplay
    from mlrecipe.runner.release import ReleaseRunner
    from mlrecipe.spec.load import load_pipeline

    start = time.perf_counter()
    spec = load_pipeline(path)
    loaded = time.perf_counter()
    runner = ReleaseRunner(spec, get_backend("local", {}), {}, QuietDisplay())
    problems = runner.problems()
    if problems:
        raise SystemExit(f"unexpected problems: {problems[:3]}")
    runner.materialize()
    return loaded - start, time.perf_counter() - loaded, len(spec.steps)


def main() -> int:
    """Print the cold and warm (median) figures; exit 1 when the warm total is over the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MLRECIPE_HOME", str(Path(tmp) / "home"))
        path = write_pipeline(Path(tmp))
        load_s, plan_s, steps = plan_once(path)
        print(f"{steps} steps, cold: load+validate {load_s * 1000:.0f} ms, plan+materialize {plan_s * 1000:.0f} ms, "
              f"total {(load_s + plan_s) * 1000:.0f} ms")
        runs = [plan_once(path) for _ in range(args.repeats)]
        cli = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run([str(Path(sys.executable).parent / "mlrecipe"), "validate", str(path), "-b", "local"],
                                  capture_output=True, text=True, check=False)
            cli.append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(done.stdout + done.stderr)
    load_m = statistics.median(r[0] for r in runs)
    plan_m = statistics.median(r[1] for r in runs)
    total = statistics.median(r[0] + r[1] for r in runs)
    print(f"{steps} steps, warm (median of {args.repeats}): load+validate {load_m * 1000:.0f} ms, "
          f"plan+materialize {plan_m * 1000:.0f} ms, total {total * 1000:.0f} ms (target <= {TARGET_S:.0f} s)")
    print(f"'mlrecipe validate pipeline.yaml -b local' (a new process: imports, load, plan, materialize), "
          f"median of {args.repeats}: {statistics.median(cli) * 1000:.0f} ms")
    return 0 if total <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
