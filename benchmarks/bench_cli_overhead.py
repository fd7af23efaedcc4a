"""CLI speed figures: start-up cost and the overhead of ``mlrecipe install`` over a hand-run torchrun.

Prints, all measured in this run:
- wall time of ``mlrecipe --help`` and ``mlrecipe validate`` (median of 5), and whether either
  imported torch or a backend library;
- median of 5 wall times of the same one-step torchrun job run (a) by hand and (b) through
  ``mlrecipe install`` on the local backend, with the absolute and relative overhead.

Targets (issue 2): overhead at most 1 s and at most 10 %. Run: ``python benchmarks/bench_cli_overhead.py``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = REPO / "tests" / "integration" / "assets" / "allreduce.py"
RUNS = 5


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def imported_modules(code: str, env: dict[str, str]) -> set[str]:
    probe = f"import sys; sys.argv={code!r}.split(); from mlrecipe.cli.app import app\n" \
            "try:\n    app()\nexcept SystemExit:\n    pass\nprint(' '.join(sys.modules), file=sys.stderr)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stderr
    return set(out.split())


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="mlrecipe-bench-"))
    env = {**os.environ, "MLRECIPE_HOME": str(home), "PATH": f"{BIN}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    recipe = home / "recipe.yaml"
    recipe.write_text(f"resources: {{nnodes: 1, nproc_per_node: 2}}\n"
                      f"train:\n  command: [torchrun]\n  args: [--nproc_per_node 2, {SCRIPT}]\n")
    pipeline = REPO / "examples" / "quickstart" / "pipeline.yaml"

    help_t = statistics.median(timed([str(BIN / "mlrecipe"), "--help"], env) for _ in range(RUNS))
    val_t = statistics.median(timed([str(BIN / "mlrecipe"), "validate", str(pipeline)], env) for _ in range(RUNS))
    heavy = {"torch", "kubernetes", "ray", "vllm", "transformers", "helm_python"}
    print(f"mlrecipe --help:     {help_t:.3f} s  heavy imports: "
          f"{sorted(heavy & imported_modules('mlrecipe --help', env)) or 'none'}")
    print(f"mlrecipe validate:   {val_t:.3f} s  heavy imports: "
          f"{sorted(heavy & imported_modules(f'mlrecipe validate {pipeline}', env)) or 'none'}")

    by_hand, through = [], []
    for i in range(RUNS):
        by_hand.append(timed([str(BIN / "torchrun"), "--nproc_per_node", "2", str(SCRIPT)], env))
        through.append(timed([str(BIN / "mlrecipe"), "install", f"bench-{i}", "training/pytorchjob-distributed",
                              "-f", str(recipe)], env))
    hand, tool = statistics.median(by_hand), statistics.median(through)
    print(f"torchrun by hand:    {hand:.3f} s (median of {RUNS})")
    print(f"mlrecipe install:    {tool:.3f} s (median of {RUNS})")
    print(f"overhead:            {tool - hand:+.3f} s  ({(tool - hand) / hand:+.1%})  target <= 1 s and <= 10 %")


if __name__ == "__main__":
    main()
