"""Slurm over SSH: a step submitted by mlrecipe through the login node vs the same ``sbatch`` typed by hand.

Starts the tests' single-machine Slurm cluster (root; it holds /tmp/mlrecipe-slurm-tests.lock while it
runs) and a real OpenSSH sshd on 127.0.0.1 in front of it (throwaway keys), then measures, in this one
run (median of RUNS, after one warm-up each so that both sides use one existing SSH connection):

- by hand: ``ssh <host> 'SLURM_CONF=... sbatch --parsable <script>'`` of the staged batch script, through
  an OpenSSH control master opened beforehand;
- mlrecipe, later steps: ``plan()`` + ``submit()`` of a fresh 2-node step with ``ssh_host`` set by a backend
  that has submitted before, i.e. one round trip that checks the digests of what it staged, unpacks what
  changed (a new release: script, program, runtime, pipeline files) and runs sbatch;
- mlrecipe, first step of a command (a new backend object each time): one more round trip, resolving
  ``remote_root`` and listing the digests there at once.

Target (issue 40): at most 0.3 s added per step. Run: ``python benchmarks/bench_slurm_ssh.py``.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RUNS = 10
TARGET_S = 0.3
RECIPE = 'resources: {nnodes: 2}\nprocess:\n  command: ["true"]\n'


def measure(tmp: Path, sshd, conf: Path) -> dict[str, float]:
    home, pipe, remote_root = tmp / "home", tmp / "pipeline", tmp / "remote"
    os.environ["MLRECIPE_HOME"] = str(home)
    home.mkdir(parents=True)
    pipe.mkdir()
    (pipe / "recipe.yaml").write_text(RECIPE)
    (home / "config.yaml").write_text(sshd.config(remote_root=str(remote_root), slurm_conf=str(conf), mount="none",
                                                  poll_seconds="0.1"))
    from mlrecipe.backends.base import ReleaseContext
    from mlrecipe.backends.registry import get_backend
    from mlrecipe.config import release_dir
    from mlrecipe.spec.load import load_step_release

    backend = get_backend("slurm")
    ours, first, script = [], [], ""
    for i in range(2 * RUNS + 1):
        spec = load_step_release(f"bench-ssh-{i}", "data-prep/data-process", [str(pipe / "recipe.yaml")])
        step = spec.steps[0]
        ctx = ReleaseContext(spec.release, spec.namespace, "slurm", release_dir("slurm", spec.namespace, spec.release))
        fresh = i > RUNS
        if fresh:
            backend = get_backend("slurm")
        start = time.perf_counter()
        plan = backend.plan(step, ctx, {"MLRECIPE_PIPELINE_DIR": spec.source_dir})
        running = backend.submit(plan, ctx)
        if i:  # the first opens the shared connection
            (first if fresh else ours).append(time.perf_counter() - start)
        script = f"{running.handle.remote_dir}/job.sbatch"
    control = tmp / "hand.sock"
    ssh = ["ssh", "-o", "BatchMode=yes", "-p", str(sshd.port), "-i", str(sshd.identity), *sshd.ssh_options(),
           "-o", f"ControlPath={control}"]
    subprocess.run([*ssh, "-o", "ControlMaster=yes", "-o", "ControlPersist=120", sshd.host, "true"], check=True,
                   capture_output=True)
    hand = []
    command = f"SLURM_CONF={shlex.quote(str(conf))} sbatch --parsable {shlex.quote(script)}"
    try:
        for i in range(RUNS + 1):
            start = time.perf_counter()
            subprocess.run([*ssh, sshd.host, command], check=True, capture_output=True)
            if i:
                hand.append(time.perf_counter() - start)
    finally:
        subprocess.run([*ssh, "-O", "exit", sshd.host], capture_output=True, check=False)
    target = backend.options.ssh_target()
    if target is not None:
        target.close()
    return {"hand": statistics.median(hand), "ours": statistics.median(ours), "first": statistics.median(first)}


def main() -> int:
    from tests.slurm.cluster import start_cluster
    from tests.slurm.sshd import start_sshd

    cluster = start_cluster()
    try:
        with tempfile.TemporaryDirectory(prefix="mlrecipe-bench-ssh-") as tmp:
            sshd = start_sshd(Path(tmp) / "keys")
            try:
                fig = measure(Path(tmp), sshd, cluster.conf)
            finally:
                sshd.stop()
    finally:
        cluster.stop()
    added = fig["ours"] - fig["hand"]
    print(f"Slurm over SSH, a 2-node step, median of {RUNS}, local sshd in front of the test cluster")
    print(f"  by hand: ssh host sbatch --parsable job.sbatch (existing connection)  {fig['hand'] * 1000:8.1f} ms")
    print(f"  mlrecipe plan() + submit() over ssh, later steps (1 round trip)      {fig['ours'] * 1000:8.1f} ms")
    print(f"  added per step                                                      {added * 1000:8.1f} ms"
          f"  (target <= {TARGET_S * 1000:.0f} ms)")
    print(f"  mlrecipe, first step of a command (2 round trips)                   {fig['first'] * 1000:8.1f} ms"
          f"  (+{(fig['first'] - fig['hand']) * 1000:.1f} ms)")
    ok = added <= TARGET_S
    print("PASS" if ok else "FAIL", f"added {added:.3f} s per step (target <= {TARGET_S} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
