"""SageMaker's local mode against torchrun by hand, and planning a 20-step hybrid pipeline (issue 25, point 10).

1. Time to the first training step: the same script (``benchmarks/assets/first_step.py``, a small MLP under DDP)
   started by hand (``torchrun --nnodes 1 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port P``, the
   rendezvous the job's host uses) and through ``mlrecipe install ... -b sagemaker -B mode=local`` (one host: the
   request, the job's supervisor, the host's namespaces and ``/opt/ml`` tree, the step runtime, torchrun), alternating
   A B / B A after one untimed warm-up of each. From the moment the command is launched to the script's first
   optimizer step (the script writes that time to a stamp file). Medians and the median of per-round differences;
   target: overhead <= 0.3 s. Then where the time goes, phase by phase (the forks of the script's parents, the
   job record's times and its ``pids.json``), and the floors: each piece of the path timed alone. Last, issue 41's
   two figures against baselines of the same run: mlrecipe's own time before torchrun starts (target <= 0.4 s; also
   as a multiple of ``python -c pass`` and beyond botocore's validator import, which stays), and from torchrun's
   start to the first step, local mode against by hand (target: within 0.1 s).
2. Planning and validating a 20-step hybrid pipeline (10 local data steps, each followed by a SageMaker training
   step in mode aws): ``load_pipeline`` plus each step's check, plan (for SageMaker: the ``create_training_job``
   request, validated against botocore's service model) and ``materialize``, in this process: cold, then the median
   of ``--repeats``; target <= 0.5 s. Also the whole command ``mlrecipe run pipeline.yaml --dry-run`` in a new process.
3. A 2-host job that only echoes (issue 37, point 2), ``mlrecipe install`` from launch to exit, as a user runs it:
   on the local backend and through ``-b sagemaker -B mode=local`` (the default ``poll_seconds``), alternating
   A B / B A after one untimed warm-up of each. Medians, their difference and ratio; target: local mode within 1 s
   of the local backend.

    .venv/bin/python benchmarks/bench_sagemaker_local.py [--runs 5] [--repeats 5] [--echo-runs 5] [--only echo]

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_pipeline_plan import plan_once  # this folder is the script's first import path

from mlrecipe.ports import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = REPO / "benchmarks" / "assets" / "first_step.py"
PYTHON_FLOOR = "python -c pass (this venv)"
VALIDATOR_FLOOR = "python -c 'import botocore.validate' (botocore's validator)"
CONFIG = ("sagemaker: {mode: aws, region: us-west-2, role_arn: 'arn:aws:iam::123456789012:role/SageMakerExec', "
          "s3_prefix: 's3://bench-bucket/mlrecipe', poll_seconds: 0.2}\n")
TRAIN_RECIPE = """\
image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-cpu
resources: {nnodes: 1, nproc_per_node: 1}
pvc: []
launcher: {type: torchrun, script: %s, args: [--stamp %s, --steps 3, --device cpu]}
"""


@dataclass
class Run:
    """One timed run: the launch seen from here, the rest from the script's stamp (and the job's record)."""

    launch: float
    created: float  #: the launched process's start time as /proc gives it (10 ms ticks, boot time in whole seconds)
    stamp: dict[str, Any]
    job: dict[str, Any] = field(default_factory=dict)  #: local mode: the training job's record
    pids: dict[str, Any] = field(default_factory=dict)  #: local mode: its supervisor's and hosts' [pid, start ticks]

    @property
    def first_step(self) -> float:
        return float(self.stamp["first_step"]) - self.launch

    def forked(self, match: str) -> float | None:
        """When the script's nearest ancestor whose command line contains ``match`` was forked (this clock)."""
        shift = self.created - self.launch
        return next((t - shift for cmd, t, _ in self.stamp.get("ancestors") or [] if match in cmd), None)

    def started(self, ident: list[int] | None) -> float | None:
        """When a process of the job's ``pids.json`` (outside the hosts' pid namespaces) started (this clock)."""
        try:
            import psutil
        except ImportError:
            return None
        if not ident:
            return None
        return psutil.boot_time() + ident[1] / os.sysconf("SC_CLK_TCK") - (self.created - self.launch)

    def phases(self) -> dict[str, float]:
        """Launch -> first step, split at the forks of the script's parents and the job record's times."""
        torchrun = self.forked("torchrun") or self.launch
        tail = {"torchrun started -> script started (torchrun, rendezvous, worker start)":
                self.stamp["start"] - torchrun,
                "script started -> first step (import torch, process group, DDP, step)":
                self.stamp["first_step"] - self.stamp["start"]}
        if not self.job:
            return {"launch -> torchrun started": torchrun - self.launch, **tail}
        training = next(t["StartTime"] for t in self.job["transitions"] if t["Status"] == "Training")
        marks = [("CLI: interpreter, imports, recipe, check, plan, request validated", self.job["created"]),
                 ("CLI: job record, /opt/ml tree, channels staged, supervisor started",
                  self.started(self.pids.get("supervisor"))),
                 ("supervisor: interpreter, imports, record updated", training),
                 ("supervisor: host process started (unshare)", self.started((self.pids.get("hosts") or [None])[0])),
                 ("unshare: mount, UTS, pid namespaces, /proc", self.forked("step_runtime")),
                 ("host: bind mounts, hostname, step runtime (python3), bash started", self.forked("bash ")),
                 ("bash -> torchrun started", torchrun)]
        out, last = {}, self.launch
        for name, when in marks:
            if when is not None:
                out[name] = when - last
                last = when
        return {**out, **tail}


def popen_created(pid: int) -> float:
    try:
        import psutil
    except ImportError:
        return time.time()
    return psutil.Process(pid).create_time()


def timed(argv: list[str], env: dict[str, str], stamp: Path) -> Run:
    """Run ``argv`` in its own session, as from a terminal: the job's supervisor has one too, and the kernel's
    autogroup scheduler shares the CPU between sessions, so both sides get the same share on a loaded machine."""
    launch = time.time()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    created = popen_created(proc.pid)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}):\n{out.decode(errors='replace')[-3000:]}")
    return Run(launch, created, json.loads(stamp.read_text()))


def first_step_by_hand(stamp: Path) -> Run:
    """torchrun as the job's host runs it (a static rendezvous at a master address, not ``--standalone``'s c10d
    one), so that the difference is mlrecipe's alone."""
    return timed([str(BIN / "torchrun"), "--nnodes", "1", "--nproc_per_node", "1", "--node_rank", "0",
                  "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(SCRIPT), "--stamp", str(stamp),
                  "--steps", "3", "--device", "cpu"], {**os.environ, "OMP_NUM_THREADS": "1"}, stamp)


def first_step_local_mode(stamp: Path, home: Path, release: str) -> Run:
    recipe = home / f"{release}.yaml"
    recipe.write_text(TRAIN_RECIPE % (SCRIPT, stamp))
    env = {**os.environ, "MLRECIPE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    try:
        run = timed([str(BIN / "mlrecipe"), "install", release, "training/pytorchjob-distributed", "-f", str(recipe),
                     "-b", "sagemaker", "-B", "mode=local", "-B", "poll_seconds=0.2"], env, stamp)
        jobs = sorted((home / "sagemaker-local" / "training-jobs").glob(f"{release}-*/training-job.json"))
        if jobs:  # read before uninstall, which removes the job's records
            run.job = json.loads(jobs[-1].read_text())
            run.pids = json.loads((jobs[-1].parent / "pids.json").read_text())
    finally:
        subprocess.run([str(BIN / "mlrecipe"), "uninstall", release], capture_output=True, env=env, check=False)
    return run


def median_of(argv: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def floors(tmp: Path, runs: int = 5) -> dict[str, float]:
    """What no local-mode launch can go below: the pieces on its path, each timed alone (median of ``runs``)."""
    from mlrecipe.backends.host.nodes import host_argv

    tree, hosts = tmp / "floor-tree", tmp / "floor-hosts"
    tree.mkdir()
    hosts.write_text("127.0.0.1 localhost\n127.0.10.1 algo-1\n")
    python = str(BIN / "python")
    mounts = [(str(tree), "/opt/ml"), (str(hosts), "/etc/hosts")]
    return {
        PYTHON_FLOOR: median_of([python, "-c", "pass"], runs),
        "mlrecipe --help (CLI imports)": median_of([str(BIN / "mlrecipe"), "--help"], runs),
        VALIDATOR_FLOOR: median_of([python, "-c", "import botocore.validate"], runs),
        "python -c 'import botocore.session; session.get_service_model(\"sagemaker\")'":
            median_of([python, "-c", "import botocore.session as s; s.get_session().get_service_model('sagemaker')"],
                      runs),
        "supervisor's imports (python -c 'import ...local.supervisor')":
            median_of([python, "-c", "import mlrecipe.backends.sagemaker.local.supervisor"], runs),
        "host namespaces + 2 bind mounts + hostname, running 'true'":
            median_of(host_argv("algo-1", mounts, ["true"]), runs),
        "the same with a root of its own (a job with file-system channels, or no /opt/ml on the machine)":
            median_of(host_argv("algo-1", mounts, ["true"], fresh_root=True), runs),
    }


def first_step_section(runs: int, tmp: Path) -> None:
    home = tmp / "home"
    home.mkdir()
    hand: list[Run] = []
    local: list[Run] = []
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
    a = statistics.median(r.first_step for r in hand)
    b = statistics.median(r.first_step for r in local)
    diffs = [y.first_step - x.first_step for x, y in zip(hand, local, strict=True)]
    print(f"1. time to the first training step, median of {runs} (alternating), load {os.getloadavg()[0]:.1f}:")
    print(f"   torchrun by hand {a:.3f} s, mlrecipe -b sagemaker -B mode=local {b:.3f} s: overhead {b - a:+.3f} s "
          f"(median of per-round differences {statistics.median(diffs):+.3f} s; target <= 0.3 s)")
    for title, runs_ in (("torchrun by hand", hand), ("mlrecipe -b sagemaker -B mode=local", local)):
        print(f"   {title}, median seconds per phase:")
        names = list(runs_[0].phases())
        for name in names:
            values = [r.phases()[name] for r in runs_ if name in r.phases()]
            print(f"     {statistics.median(values):7.3f}  {name}")
    hand_tails = [sum(list(r.phases().values())[-2:]) for r in hand]
    local_tails = [sum(list(r.phases().values())[-2:]) for r in local]
    heads = [sum(list(r.phases().values())[:-2]) for r in local]
    hand_tail, local_tail, local_head = (statistics.median(v) for v in (hand_tails, local_tails, heads))
    print(f"   before torchrun: {local_head:.3f} s; torchrun -> first step: {local_tail:.3f} s vs {hand_tail:.3f} s "
          f"by hand ({local_tail - hand_tail:+.3f} s)")
    print(f"   floors (each piece alone, median of 5, load {os.getloadavg()[0]:.1f}):")
    found = floors(tmp)
    for name, seconds in found.items():
        print(f"     {seconds:7.3f}  {name}")
    validator = found[VALIDATOR_FLOOR] - found[PYTHON_FLOOR]
    tail_diffs = [y - x for x, y in zip(hand_tails, local_tails, strict=True)]
    print("   the two figures of issue 41 point 4, against baselines measured in this run:")
    print(f"     mlrecipe's own time before torchrun starts: {local_head:.3f} s (target <= 0.4 s: ratio "
          f"{local_head / 0.4:.2f}); {local_head / found[PYTHON_FLOOR]:.1f}x 'python -c pass'; beyond botocore's "
          f"validator import (which stays, {validator:.3f} s here): {local_head - validator:.3f} s")
    print(f"     from torchrun's start to the first step, local mode - by hand: {local_tail - hand_tail:+.3f} s by "
          f"medians, {statistics.median(tail_diffs):+.3f} s median of per-round differences (target: within 0.1 s); "
          f"ratio {local_tail / hand_tail:.3f}")


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


ECHO_RECIPE = "image: python\nresources: {nnodes: 2}\npvc: []\ntrain:\n  command: [echo, 'hello from $HOSTNAME']\n"


def echo_install(home: Path, release: str, backend: list[str]) -> float:
    """Seconds from launching ``mlrecipe install`` of the 2-host echo job to its exit (then uninstalled)."""
    recipe = home / "echo.yaml"
    recipe.write_text(ECHO_RECIPE)
    env = {**os.environ, "MLRECIPE_HOME": str(home)}
    start = time.perf_counter()
    done = subprocess.run([str(BIN / "mlrecipe"), "install", release, "training/pytorchjob-distributed", "-f",
                           str(recipe), *backend], capture_output=True, text=True, env=env, check=False,
                          start_new_session=True)
    seconds = time.perf_counter() - start
    subprocess.run([str(BIN / "mlrecipe"), "uninstall", release], capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(backend)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return seconds


def echo_section(runs: int, tmp: Path) -> None:
    home = tmp / "echo-home"
    home.mkdir()
    sides = {"local backend (-b local)": ["-b", "local"],
             "SageMaker local mode (-b sagemaker -B mode=local)": ["-b", "sagemaker", "-B", "mode=local"]}
    for i, backend in enumerate(sides.values()):
        echo_install(home, f"echo-warm-{i}", backend)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(runs):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            times[name].append(echo_install(home, f"echo-{i}", sides[name]))
    local, sagemaker = (statistics.median(t) for t in times.values())
    diffs = [b - a for a, b in zip(*times.values(), strict=True)]
    print(f"3. a 2-host echo job, 'mlrecipe install' launch -> exit, median of {runs} (alternating), "
          f"load {os.getloadavg()[0]:.1f}:")
    for name, values in times.items():
        print(f"   {statistics.median(values):7.3f} s  {name}  (runs: {', '.join(f'{v:.2f}' for v in values)})")
    print(f"   local mode - local backend: {sagemaker - local:+.3f} s (median of per-round differences "
          f"{statistics.median(diffs):+.3f} s), ratio {sagemaker / local:.2f}; target: within 1 s")


def compile_bytecode() -> None:
    """Byte-compile the source tree, as installing a wheel does: with ``PYTHONDONTWRITEBYTECODE`` set (some shells
    set it) an editable checkout would otherwise compile every changed module on every start, a cost no installed
    mlrecipe pays."""
    import compileall

    compileall.compile_dir(str(REPO / "src"), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds of section 1")
    parser.add_argument("--repeats", type=int, default=5, help="warm repeats of section 2")
    parser.add_argument("--echo-runs", type=int, default=5, help="alternating rounds of section 3")
    parser.add_argument("--only", choices=["first-step", "planning", "echo"], help="run one section only")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    compile_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "planning"):
            planning_section(args.repeats, Path(tmp))
        os.environ.pop("MLRECIPE_HOME", None)
        if args.runs > 0 and args.only in (None, "first-step"):
            first_step_section(args.runs, Path(tmp))
        if args.echo_runs > 0 and args.only in (None, "echo"):
            echo_section(args.echo_runs, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
