"""Slurm over SSH: a step submitted by mlrecipe through the login node vs the same ``sbatch`` typed by hand.

Starts the tests' single-machine Slurm cluster (root; it holds /tmp/mlrecipe-slurm-tests.lock while it
runs) and a real OpenSSH sshd on 127.0.0.1 in front of it (throwaway keys), then measures, in this one
run (median of RUNS, after one warm-up each so that both sides use one existing SSH connection; each
mlrecipe submission is paired with a hand-typed one right after it, and the added cost is the median of
the pairs' differences, so that the machine's load drifting between runs cancels out):

- by hand: ``ssh <host> 'SLURM_CONF=... sbatch --parsable <script>'`` of the staged batch script, through
  an OpenSSH control master opened beforehand;
- mlrecipe, later steps: ``plan()`` + ``submit()`` of a fresh 2-node step with ``ssh_host`` set by a backend
  that has submitted before, i.e. one round trip that checks the digests of what it staged, unpacks what
  changed (a new release: script, program, runtime, pipeline files) and runs sbatch;
- mlrecipe, a command's first step (a new backend object each time), with the staging record of the
  previous command (``$MLRECIPE_HOME/ssh/``): one round trip as well;
- the same with no record (a machine's first command): one more round trip, resolving ``remote_root`` and
  listing the digests there at once.

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

    control = tmp / "hand.sock"
    ssh = ["ssh", "-o", "BatchMode=yes", "-p", str(sshd.port), "-i", str(sshd.identity), *sshd.ssh_options(),
           "-o", f"ControlPath={control}"]
    subprocess.run([*ssh, "-o", "ControlMaster=yes", "-o", "ControlPersist=120", sshd.host, "true"], check=True,
                   capture_output=True)

    def by_hand(script: str) -> float:
        start = time.perf_counter()
        command = f"SLURM_CONF={shlex.quote(str(conf))} sbatch --parsable {shlex.quote(script)}"
        subprocess.run([*ssh, sshd.host, command], check=True, capture_output=True)
        return time.perf_counter() - start

    backend = get_backend("slurm")
    modes = ["warm-up", *["later"] * RUNS, *["command"] * RUNS, *["no-record"] * RUNS]
    out: dict[str, list[float]] = {f"{k}{m}": [] for k in ("", "added-") for m in ("later", "command", "no-record")}
    out["hand"] = []
    try:
        for i, mode in enumerate(modes):  # each mlrecipe submission paired with a hand-typed one right after it
            spec = load_step_release(f"bench-ssh-{i}", "data-prep/data-process", [str(pipe / "recipe.yaml")])
            step = spec.steps[0]
            ctx = ReleaseContext(spec.release, spec.namespace, "slurm",
                                 release_dir("slurm", spec.namespace, spec.release))
            if mode != "later":
                backend = get_backend("slurm")  # a new command
            if mode == "no-record":
                for record in (home / "ssh").glob("staged-*.json"):
                    record.unlink()
            start = time.perf_counter()
            plan = backend.plan(step, ctx, {"MLRECIPE_PIPELINE_DIR": spec.source_dir})
            running = backend.submit(plan, ctx)
            took = time.perf_counter() - start
            hand = by_hand(f"{running.handle.remote_dir}/job.sbatch")
            if mode != "warm-up":  # the warm-up opens the shared connection
                out[mode].append(took)
                out[f"added-{mode}"].append(took - hand)
                out["hand"].append(hand)
    finally:
        subprocess.run([*ssh, "-O", "exit", sshd.host], capture_output=True, check=False)
        target = backend.options.ssh_target()
        if target is not None:
            target.close()
    return {k: statistics.median(v) for k, v in out.items()}


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
    added = max(fig["added-later"], fig["added-command"])
    print(f"Slurm over SSH, a 2-node step, median of {RUNS}, local sshd in front of the test cluster")
    print(f"  by hand: ssh host sbatch --parsable job.sbatch (existing connection)  {fig['hand'] * 1000:8.1f} ms")
    for mode, what in (("later", "a later step of a command (1 round trip)"),
                       ("command", "a command's first step, staging record kept (1 round trip)"),
                       ("no-record", "a first step with no staging record (2 round trips)")):
        print(f"  mlrecipe, {what:<58} {fig[mode] * 1000:8.1f} ms  (+{fig['added-' + mode] * 1000:.1f} ms)")
    print(f"  added per step, worst of the first two (median of paired differences) {added * 1000:6.1f} ms"
          f"  (target <= {TARGET_S * 1000:.0f} ms)")
    ok = added <= TARGET_S
    print("PASS" if ok else "FAIL", f"added {added:.3f} s per step (target <= {TARGET_S} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
