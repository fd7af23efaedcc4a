"""Slurm submission overhead: mlrecipe against a hand-written ``sbatch`` of the same batch script.

Uses the cluster ``SLURM_CONF`` points at when ``scontrol ping`` answers, else starts the tests'
single-machine cluster (root; controller + two slurmd on 127.0.0.1) and stops it at the end.
Prints, all measured in this run (median of RUNS):

- submit: ``sbatch --parsable job.sbatch`` by hand vs mlrecipe's ``plan()`` + ``submit()`` of the
  same step (the script mlrecipe writes and submits), i.e. the overhead per step of the backend;
- end to end: ``sbatch --wait job.sbatch`` vs ``mlrecipe install`` of that step (a new CLI process
  that validates, plans, submits, polls until the job ended and records the state).

Target (issue 5): submission overhead per step at most 0.5 s.
Run: ``python benchmarks/bench_slurm_submit.py``.
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
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent
RUNS = 10
TARGET_S = 0.5
RECIPE = 'resources: {nnodes: 2}\nprocess:\n  command: ["true"]\n'


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _cluster_up() -> bool:
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "UP" in out.stdout


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(home: Path) -> dict[str, float]:
    os.environ["MLRECIPE_HOME"] = str(home)
    from mlrecipe.backends.base import ReleaseContext
    from mlrecipe.backends.registry import get_backend
    from mlrecipe.config import release_dir
    from mlrecipe.spec.load import load_step_release

    recipe = home / "recipe.yaml"
    home.mkdir(parents=True, exist_ok=True)
    recipe.write_text(RECIPE)
    (home / "config.yaml").write_text("slurm: {mount: none, poll_seconds: 0.1}\n")
    backend = get_backend("slurm")
    env = dict(os.environ)

    ours, hand, script = [], [], None
    for i in range(RUNS):
        spec = load_step_release(f"bench-{i}", "data-prep/data-process", [str(recipe)])
        step = spec.steps[0]
        ctx = ReleaseContext(spec.release, spec.namespace, "slurm", release_dir("slurm", spec.namespace, spec.release))
        start = time.perf_counter()
        plan = backend.plan(step, ctx, {"MLRECIPE_PIPELINE_DIR": spec.source_dir})
        backend.submit(plan, ctx)
        ours.append(time.perf_counter() - start)
        script = plan.script_path
        hand.append(_timed(["sbatch", "--parsable", str(script)], env))

    e2e_ours, e2e_hand = [], []
    cli_env = {**env, "PATH": f"{BIN}:{env.get('PATH', '')}"}
    for i in range(RUNS):
        e2e_ours.append(_timed([str(BIN / "mlrecipe"), "install", f"e2e-{i}", "data-prep/data-process", "-f",
                                str(recipe), "-b", "slurm"], cli_env))
        e2e_hand.append(_timed(["sbatch", "--wait", "--parsable", str(script)], env))
    return {
        "sbatch": _median(hand), "mlrecipe_submit": _median(ours),
        "sbatch_wait": _median(e2e_hand), "mlrecipe_install": _median(e2e_ours),
    }


def main() -> int:
    cluster = None
    if not _cluster_up():
        from tests.slurm.cluster import start_cluster

        cluster = start_cluster()
        os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        with tempfile.TemporaryDirectory(prefix="mlrecipe-bench-") as tmp:
            fig = measure(Path(tmp) / "home")
    finally:
        if cluster is not None:
            cluster.stop()
    submit_overhead = fig["mlrecipe_submit"] - fig["sbatch"]
    e2e_overhead = fig["mlrecipe_install"] - fig["sbatch_wait"]
    where = "the tests' single-machine cluster" if cluster else os.environ.get("SLURM_CONF", "the default cluster")
    print(f"Slurm submission of a 2-node step, median of {RUNS}, on {where}")
    print(f"  hand-written sbatch --parsable job.sbatch      {fig['sbatch'] * 1000:8.1f} ms")
    print(f"  mlrecipe plan() + submit() of the same step     {fig['mlrecipe_submit'] * 1000:8.1f} ms")
    print(f"  overhead per step                               {submit_overhead * 1000:8.1f} ms"
          f"  (target <= {TARGET_S * 1000:.0f} ms)")
    print("End to end, the job run to completion:")
    print(f"  sbatch --wait job.sbatch                        {fig['sbatch_wait'] * 1000:8.1f} ms")
    print(f"  mlrecipe install (new CLI process)              {fig['mlrecipe_install'] * 1000:8.1f} ms")
    print(f"  overhead incl. CLI start-up and state record    {e2e_overhead * 1000:8.1f} ms")
    ok = submit_overhead <= TARGET_S
    print("PASS" if ok else "FAIL", f"submission overhead {submit_overhead:.3f} s (target <= {TARGET_S} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
