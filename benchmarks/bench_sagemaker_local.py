"""SageMaker's local mode against torchrun by hand, and planning a 20-step hybrid pipeline (issue 25, point 10).

1. Time to the first training step: the same script (``benchmarks/assets/first_step.py``, a small MLP under DDP)
   started by hand (``torchrun --standalone --nproc_per_node 1``) and through ``mlrecipe install ... -b sagemaker
   -B mode=local`` (one host: the request, the job's supervisor, the host's namespaces and ``/opt/ml`` tree, the step
   runtime, torchrun), alternating A B / B A after one untimed warm-up of each. From the moment the command is
   launched to the script's first optimizer step (the script writes that time to a stamp file). Medians and the
   median of per-round differences; target: overhead <= 0.3 s.
2. Planning and validating a 20-step hybrid pipeline (10 local data steps, each followed by a SageMaker training
   step in mode aws): ``load_pipeline`` plus each step's check, plan (for SageMaker: the ``create_training_job``
   request, validated against botocore's service model) and ``materialize``, in this process: cold, then the median
   of ``--repeats``; target <= 0.5 s. Also the whole command ``mlrecipe run pipeline.yaml --dry-run`` in a new process.

    .venv/bin/python benchmarks/bench_sagemaker_local.py [--runs 5] [--repeats 5]

It prints figures and exits 0 (1 only when a run fails); it asserts no target.
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

from bench_pipeline_plan import plan_once  # this folder is the script's first import path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = REPO / "benchmarks" / "assets" / "first_step.py"
CONFIG = ("sagemaker: {mode: aws, region: us-west-2, role_arn: 'arn:aws:iam::123456789012:role/SageMakerExec', "
          "s3_prefix: 's3://bench-bucket/mlrecipe', poll_seconds: 0.2}\n")
TRAIN_RECIPE = """\
image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-cpu
resources: {nnodes: 1, nproc_per_node: 1}
pvc: []
launcher: {type: torchrun, script: %s, args: [--stamp %s, --steps 3, --device cpu]}
"""


def first_step_by_hand(stamp: Path) -> float:
    launch = time.time()
    subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "1", str(SCRIPT), "--stamp",
                    str(stamp), "--steps", "3", "--device", "cpu"], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(stamp.read_text())["first_step"] - launch


def first_step_local_mode(stamp: Path, home: Path, release: str) -> float:
    recipe = home / f"{release}.yaml"
    recipe.write_text(TRAIN_RECIPE % (SCRIPT, stamp))
    env = {**os.environ, "MLRECIPE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    launch = time.time()
    done = subprocess.run([str(BIN / "mlrecipe"), "install", release, "training/pytorchjob-distributed", "-f",
                           str(recipe), "-b", "sagemaker", "-B", "mode=local", "-B", "poll_seconds=0.2"],
                          capture_output=True, text=True, env=env, check=False)
    subprocess.run([str(BIN / "mlrecipe"), "uninstall", release], capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mlrecipe install failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(stamp.read_text())["first_step"] - launch


def first_step_section(runs: int, tmp: Path) -> None:
    home = tmp / "home"
    home.mkdir()
    hand, local = [], []
    first_step_by_hand(tmp / "warm-a.json")
    first_step_local_mode(tmp / "warm-b.json", home, "warm")
    for i in range(runs):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        for side in order:
            stamp = tmp / f"{side}{i}.json"
            if side == "a":
                hand.append(first_step_by_hand(stamp))
            else:
                local.append(first_step_local_mode(stamp, home, f"bench-{i}"))
    diffs = [b - a for a, b in zip(hand, local, strict=True)]
    print(f"1. time to the first training step, median of {runs} (alternating):")
    print(f"   torchrun by hand {statistics.median(hand):.3f} s, mlrecipe -b sagemaker -B mode=local "
          f"{statistics.median(local):.3f} s: overhead {statistics.median(local) - statistics.median(hand):+.3f} s "
          f"(median of per-round differences {statistics.median(diffs):+.3f} s; target <= 0.3 s)")


def hybrid_pipeline(directory: Path, steps: int = 20) -> Path:
    recipe = directory / "train.yaml"
    recipe.write_text(TRAIN_RECIPE % ("train.py", "/tmp/stamp"))
    lines = ["release: bench-hybrid", "steps:"]
    for i in range(steps // 2):
        lines += [f"  - name: data-{i}", "    chart: data-prep/data-process",
                  "    values: {pvc: [], process: {command: [python3, -c, \"'print(1)'\"]}}",
                  f"  - name: train-{i}", "    chart: training/pytorchjob-distributed", "    backend: sagemaker",
                  f"    depends_on: data-{i}", "    recipe: train.yaml",
                  f"    values: {{train: {{env: [{{name: RUN, value: '{i}'}}]}}}}"]
    path = directory / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def planning_section(repeats: int, tmp: Path) -> None:
    home = tmp / "plan-home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    os.environ["MLRECIPE_HOME"] = str(home)
    path = hybrid_pipeline(tmp)
    load_s, plan_s, steps = plan_once(path)
    runs = [plan_once(path) for _ in range(repeats)]
    cli = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([str(BIN / "mlrecipe"), "run", str(path), "--dry-run"], capture_output=True, text=True,
                              env=os.environ, check=False)
        cli.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    total = statistics.median(r[0] + r[1] for r in runs)
    print(f"2. a {steps}-step hybrid pipeline (local + SageMaker mode aws), in this process: cold "
          f"{(load_s + plan_s) * 1000:.0f} ms; warm, median of {repeats}: load+validate "
          f"{statistics.median(r[0] for r in runs) * 1000:.0f} ms, check+plan+materialize "
          f"{statistics.median(r[1] for r in runs) * 1000:.0f} ms, total {total * 1000:.0f} ms (target <= 500 ms)")
    print(f"   'mlrecipe run pipeline.yaml --dry-run' (a new process, imports included), median of {repeats}: "
          f"{statistics.median(cli) * 1000:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds of section 1")
    parser.add_argument("--repeats", type=int, default=5, help="warm repeats of section 2")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        planning_section(args.repeats, Path(tmp))
        os.environ.pop("MLRECIPE_HOME", None)
        if args.runs > 0:
            first_step_section(args.runs, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
