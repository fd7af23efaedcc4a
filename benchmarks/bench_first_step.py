"""Time to the first training step, and a one-minute job: ``torchrun`` by hand vs ``mlrecipe install``.

Measured in one run, A (by hand) and B (through mlrecipe) alternating (A B, then B A, ...), after one untimed
warm-up of each:

1. time to the first training step: from the moment the command is launched (``time.time()`` just before the
   fork) to the moment the training script (``benchmarks/assets/first_step.py``, a small MLP under DDP: gloo on
   CPU, NCCL on CUDA) has completed its first optimizer step (the script writes that ``time.time()`` to a stamp
   file). A is ``torchrun --nnodes 1 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port PORT script``;
   B is ``mlrecipe install RELEASE training/pytorchjob-distributed -f recipe.yaml`` on the local backend with
   ``launcher: {type: torchrun, script: ..., args: [...]}`` (1 node x 1 process). Medians of ``--runs`` each,
   the overhead B - A in seconds (target <= 0.3 s; also as the median of the per-round differences, steadier on
   a shared machine), and where the time goes: the parent processes' start times
   (read by the script) split the launch into the CLI (start, imports, planning, submit), the node (``unshare``
   mount namespace, step runtime, bash), torchrun, the script up to its first step, and the exit after the last.
2. a one-minute job: the same script with a step count calibrated by hand (steps/s over a few seconds) so that
   the whole job by hand lasts about ``--job-seconds`` (default 60); the total wall time by hand vs through
   mlrecipe, medians of ``--long-runs`` (default 3) each, the relative overhead (target <= 2 %), and the
   training part alone (first to last step) to tell start/exit costs from a slower training loop, and the CPU time
   of everything each command ran (user + system, ``getrusage`` of the reaped children): on a busy machine wall
   times swing by several per cent between runs, CPU time far less, and it shows whether the job does more work
   under mlrecipe (a CLI that spins while it waits, a slower loop) or only waits longer.

``--device cuda`` (the default when ``nvidia-smi -L`` lists a GPU) runs on one GPU: by hand with
``CUDA_VISIBLE_DEVICES=0``, through mlrecipe with ``resources: {limits: {nvidia.com/gpu: 1}}``. ``--device cpu``
requests no GPU (and passes ``-B gpus=cpu`` where the machine has GPUs). Every mlrecipe run uses its own release
in a temporary ``MLRECIPE_HOME`` and is uninstalled afterwards; processes left behind are reported and killed.
The script prints figures and exits 0; it asserts no target (it exits 1 only when a run fails).

mlrecipe's modules are byte-compiled first, as ``pip install`` does: a checkout run under
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile them from source at every CLI start (about 30 ms that no
installed copy pays; torch, torchrun's side, comes byte-compiled from its wheel).

Run (about 7 minutes with the defaults on the 2-core machine)::

    .venv/bin/python benchmarks/bench_first_step.py
    .venv/bin/python benchmarks/bench_first_step.py --job-seconds 20 --runs 3 --long-runs 2   # quick trial
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from mlrecipe.ports import free_port

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "assets" / "first_step.py"
CHART = "training/pytorchjob-distributed"
TAG_VAR = "MLRECIPE_BENCH_TAG"  #: in every process this benchmark starts, to find what is left behind


def venv_bin() -> Path:
    """The environment's bin directory (torchrun, mlrecipe): this interpreter's, else the repo's .venv."""
    here = Path(sys.executable).parent
    return here if (here / "mlrecipe").exists() else REPO / ".venv" / "bin"


BIN = venv_bin()


class RunFailed(RuntimeError):
    """A benchmarked command exited non-zero or ran past its time limit."""


@dataclass
class Run:
    """One timed run: launch and exit seen from here, the rest from the script's stamp file (``time.time()``)."""

    launch: float
    exited: float
    launched_pid: int
    start: float  #: the script began (before ``import torch``)
    first: float  #: its first optimizer step was done
    end: float  #: its last step was done
    steps: int
    ancestors: list[tuple[str, float, int]]  #: the script's parents: command line, start time, pid
    cpu: float = 0.0  #: user + system seconds of every process the command ran (and waited for)

    @classmethod
    def from_stamp(cls, launch: float, exited: float, pid: int, stamp: dict[str, Any], cpu: float = 0.0) -> Run:
        chain = [(str(c), float(t), int(p)) for c, t, p in stamp.get("ancestors") or []]
        return cls(launch, exited, pid, float(stamp["start"]), float(stamp["first_step"]), float(stamp["end"]),
                   int(stamp["steps"]), chain, cpu)

    @property
    def first_step(self) -> float:
        return self.first - self.launch

    @property
    def wall(self) -> float:
        return self.exited - self.launch

    @property
    def training(self) -> float:
        return self.end - self.first

    def phases(self) -> dict[str, float]:
        """Launch -> ... -> exit, split by the start times of the script's parent processes.

        Those come from ``/proc`` (10 ms ticks, boot time in whole seconds), so they are shifted onto this
        clock by the launched process (torchrun by hand, the CLI through mlrecipe), whose start is the launch.
        """
        created = {pid: t for _, t, pid in self.ancestors}
        offset = created.get(self.launched_pid, self.launch) - self.launch
        torchrun = self.ancestors[0][1] - offset if self.ancestors else self.launch
        node = next((t - offset for c, t, _ in self.ancestors if "step_runtime" in c), torchrun)
        return {
            "launch -> node process started (CLI: start, imports, plan, submit)": node - self.launch,
            "node started -> torchrun started (unshare + mounts, step runtime, bash)": torchrun - node,
            "torchrun started -> script started (torchrun, worker start)": self.start - torchrun,
            "script started -> first step done (import torch, init, DDP, step)": self.first - self.start,
            "last step done -> command exited (teardown, polling)": self.exited - self.end,
        }


@dataclass
class Bench:
    """The shared settings of every run."""

    device: str
    machine_gpus: list[str]
    home: Path
    env: dict[str, str]
    timeout: float
    counter: int = 0
    leftovers: list[str] = field(default_factory=list)

    def script_args(self, stamp: Path, steps: int | None = None, seconds: float | None = None) -> list[str]:
        args = [f"--stamp {stamp}", f"--device {self.device}"]
        args.append(f"--seconds {seconds}" if seconds is not None else f"--steps {steps}")
        return args

    def hand_env(self) -> dict[str, str]:
        env = dict(self.env)
        if self.device == "cuda":
            env.update(CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
        elif self.machine_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def by_hand(self, steps: int | None = None, seconds: float | None = None) -> Run:
        stamp = self.new_stamp()
        argv = [str(BIN / "torchrun"), "--nnodes", "1", "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), str(SCRIPT)]
        for arg in self.script_args(stamp, steps, seconds):
            argv += arg.split(" ", 1)
        return self.timed(argv, self.hand_env(), stamp)

    def through_mlrecipe(self, steps: int | None = None, seconds: float | None = None) -> Run:
        stamp = self.new_stamp()
        release = f"bench-{self.counter}"
        recipe = self.home / f"{release}.yaml"
        gpus = ', limits: {"nvidia.com/gpu": 1}' if self.device == "cuda" else ""
        args = ", ".join(json.dumps(a) for a in self.script_args(stamp, steps, seconds))
        recipe.write_text(f"resources: {{nnodes: 1, nproc_per_node: 1{gpus}}}\n"
                          f"launcher: {{type: torchrun, script: {json.dumps(str(SCRIPT))}, args: [{args}]}}\n",
                          encoding="utf-8")
        argv = [str(BIN / "mlrecipe"), "install", release, CHART, "-f", str(recipe)]
        if self.device == "cpu" and self.machine_gpus:
            argv += ["-B", "gpus=cpu"]
        try:
            return self.timed(argv, self.env, stamp)
        finally:
            subprocess.run([str(BIN / "mlrecipe"), "uninstall", release], env=self.env, cwd=self.home,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
            self.reap()

    def new_stamp(self) -> Path:
        self.counter += 1
        return self.home / f"stamp-{self.counter}.json"

    def timed(self, argv: list[str], env: dict[str, str], stamp: Path) -> Run:
        log = self.home / f"run-{self.counter}.log"
        with open(log, "wb") as out:
            before = children_cpu()
            launch = time.time()
            proc = subprocess.Popen(argv, env=env, cwd=self.home, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                code = None
            exited = time.time()
            cpu = children_cpu() - before
        self.reap()
        if code != 0 or not stamp.exists():
            tail = log.read_text(errors="replace").splitlines()[-25:]
            why = "ran past its time limit" if code is None else f"exited with status {code}"
            raise RunFailed(f"{' '.join(argv)} {why}; last lines:\n  " + "\n  ".join(tail))
        return Run.from_stamp(launch, exited, proc.pid, json.loads(stamp.read_text().splitlines()[-1]), cpu)

    def reap(self) -> None:
        """Kill (and note) every process this benchmark started that is still alive."""
        for p in tagged_processes(self.env[TAG_VAR]):
            with contextlib.suppress(psutil.Error):
                self.leftovers.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()


def children_cpu() -> float:
    """User + system seconds of this process's reaped children and their reaped descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group (mlrecipe then stops its nodes), SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def tagged_processes(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(TAG_VAR) == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def nvidia_gpus() -> list[str]:
    """GPU names ``nvidia-smi`` lists (none without the tool or a GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def byte_compile() -> str:
    """Byte-compile the mlrecipe package the CLI imports (where it can); a line for the header."""
    spec = importlib.util.find_spec("mlrecipe")
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    ok = all(compileall.compile_dir(d, quiet=1) for d in where) if where else False
    flag = " (PYTHONDONTWRITEBYTECODE is set here)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""
    return f"mlrecipe's modules byte-compiled before the runs{flag}: {'done' if ok else 'FAILED'}"


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):7.3f} s  (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def alternate(runs: int, a: Callable[[], Run], b: Callable[[], Run], label: str,
              show: Callable[[Run], str]) -> tuple[list[Run], list[Run]]:
    """``runs`` of each, A B then B A and so on, every run printed as it ends."""
    out_a: list[Run] = []
    out_b: list[Run] = []
    for i in range(runs):
        order = [("A", a, out_a), ("B", b, out_b)]
        for name, fn, out in order if i % 2 == 0 else order[::-1]:
            run = fn()
            out.append(run)
            who = "by hand " if name == "A" else "mlrecipe"
            print(f"  {label} {i + 1}/{runs} {name} {who}  {show(run)}", flush=True)
    return out_a, out_b


def paired(a: list[Run], b: list[Run], figure: Callable[[Run], float]) -> float:
    """The median of B - A over the rounds: each pair ran back to back, so a load that drifts over minutes (a
    shared machine) weighs less than in the difference of the two medians."""
    return statistics.median(figure(rb) - figure(ra) for ra, rb in zip(a, b, strict=True))


def print_phases(a: list[Run], b: list[Run]) -> None:
    print("  where the time goes, medians in ms (A by hand | B mlrecipe | B - A):")
    keys = list(a[0].phases())
    for key in keys:
        ma = statistics.median(r.phases()[key] for r in a) * 1000
        mb = statistics.median(r.phases()[key] for r in b) * 1000
        print(f"    {key:<76} {ma:7.0f} | {mb:7.0f} | {mb - ma:+6.0f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each for the first step (default 5)")
    parser.add_argument("--long-runs", type=int, default=3, help="runs of each of the one-minute job (default 3)")
    parser.add_argument("--job-seconds", type=float, default=60.0,
                        help="how long the long job lasts by hand, start to exit (default 60)")
    parser.add_argument("--steps", type=int, default=20, help="steps after the first in the first-step runs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda if 'nvidia-smi -L' lists a GPU, else cpu")
    parser.add_argument("--keep", action="store_true", help="keep the temporary MLRECIPE_HOME (logs, stamps)")
    return parser.parse_args(argv)


def header(device: str, gpus: list[str]) -> None:
    load = os.getloadavg()
    print("== bench_first_step: time to the first training step and a one-minute job, "
          "torchrun by hand (A) vs mlrecipe install (B) ==")
    print(f"machine:  {os.cpu_count()} CPU(s) ({cpu_model()}), "
          f"GPU: {', '.join(gpus) if gpus else 'none (nvidia-smi lists none)'}; load average {load[0]:.2f}")
    print(f"software: python {platform.python_version()}, torch {version('torch')}, "
          f"mlrecipe {version('mlrecipe')}, {platform.system()} {platform.release()}")
    print(f"device:   {device}" + (" (one GPU: CUDA_VISIBLE_DEVICES=0 by hand, nvidia.com/gpu: 1 in the recipe)"
                                   if device == "cuda" else " (no GPU requested)"))
    print(f"started:  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    gpus = nvidia_gpus()
    device = args.device or ("cuda" if gpus else "cpu")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped benchmark still kills what it started
    header(device, gpus)
    print(f"bytecode: {byte_compile()}", flush=True)
    home = Path(tempfile.mkdtemp(prefix="mlrecipe-bench-first-step-"))
    env = {**os.environ, "MLRECIPE_HOME": str(home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), TAG_VAR: uuid.uuid4().hex}
    env.pop("MLRECIPE_RUN_ID", None)
    bench = Bench(device, gpus, home, env, timeout=max(300.0, 4 * args.job_seconds))
    try:
        return measure(bench, args)
    except RunFailed as exc:
        print(f"\nrun failed, no figures: {exc}", flush=True)
        return 1
    finally:
        bench.reap()
        if bench.leftovers:
            print(f"processes left behind (killed): {len(bench.leftovers)}")
            for line in bench.leftovers:
                print(f"  {line}")
        else:
            print("processes left behind: none")
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


def measure(bench: Bench, args: argparse.Namespace) -> int:
    steps = args.steps
    print(f"\n[1] time to the first training step: launch -> first optimizer step done "
          f"({args.runs} runs each, alternating, after 1 warm-up each; {steps + 1} steps per run)", flush=True)
    bench.by_hand(steps)
    bench.through_mlrecipe(steps)
    a, b = alternate(args.runs, lambda: bench.by_hand(steps), lambda: bench.through_mlrecipe(steps), "run",
                     lambda r: f"first step after {r.first_step:.3f} s, exited after {r.wall:.3f} s, "
                     f"CPU {r.cpu:.3f} s")
    ma = statistics.median(r.first_step for r in a)
    mb = statistics.median(r.first_step for r in b)
    print(f"  A torchrun by hand:      {spread([r.first_step for r in a])}")
    print(f"  B mlrecipe install:      {spread([r.first_step for r in b])}")
    print(f"  overhead (B - A):        {mb - ma:+7.3f} s  ({(mb - ma) / ma:+.1%})   target <= 0.3 s")
    print(f"  paired (B - A per round, median): {paired(a, b, lambda r: r.first_step):+.3f} s")
    ca, cb = statistics.median(r.cpu for r in a), statistics.median(r.cpu for r in b)
    print(f"  CPU time of the whole command, medians: A {ca:.3f} s | B {cb:.3f} s: mlrecipe adds {cb - ca:+.3f} s")
    print_phases(a, b)

    calib_seconds = min(5.0, max(1.0, args.job_seconds / 4))
    calib = bench.by_hand(seconds=calib_seconds)
    rate = (calib.steps - 1) / calib.training
    fixed = statistics.median(r.first_step + (r.exited - r.end) for r in a)
    long_steps = max(1, round(rate * max(1.0, args.job_seconds - fixed)))
    print(f"\n[2] one-{'minute' if args.job_seconds == 60 else f'{args.job_seconds:g}-second'} job: "
          f"{long_steps + 1} steps ({rate:.0f} steps/s by hand over {calib_seconds:g} s, plus {fixed:.1f} s of "
          f"start and exit), {args.long_runs} runs each, alternating", flush=True)
    la, lb = alternate(args.long_runs, lambda: bench.by_hand(long_steps), lambda: bench.through_mlrecipe(long_steps),
                       "job", lambda r: f"wall {r.wall:.3f} s, training {r.training:.3f} s, "
                       f"first step after {r.first_step:.3f} s, CPU {r.cpu:.3f} s")
    wa, wb = statistics.median(r.wall for r in la), statistics.median(r.wall for r in lb)
    ta, tb = statistics.median(r.training for r in la), statistics.median(r.training for r in lb)
    print(f"  A torchrun by hand:      {spread([r.wall for r in la])}")
    print(f"  B mlrecipe install:      {spread([r.wall for r in lb])}")
    print(f"  overhead (B - A):        {wb - wa:+7.3f} s  ({(wb - wa) / wa:+.2%})   target <= 2 %")
    pw = paired(la, lb, lambda r: r.wall)
    print(f"  paired (B - A per round, median): {pw:+.3f} s ({pw / wa:+.2%})")
    print(f"  training alone (first -> last step): A {ta:.3f} s | B {tb:.3f} s ({(tb - ta) / ta:+.2%})")
    ca, cb = statistics.median(r.cpu for r in la), statistics.median(r.cpu for r in lb)
    print(f"  CPU time of the whole command:       A {ca:.3f} s | B {cb:.3f} s: mlrecipe adds {cb - ca:+.3f} s "
          f"({(cb - ca) / ca:+.2%})")
    fa = statistics.median(r.wall - r.training for r in la)
    fb = statistics.median(r.wall - r.training for r in lb)
    print(f"  start + exit (wall - training):      A {fa:.3f} s | B {fb:.3f} s: mlrecipe adds {fb - fa:+.3f} s "
          f"= {(fb - fa) / wa:+.2%} of the job")
    print_phases(la, lb)
    print(f"\nsummary ({bench.device}): first step {ma:.3f} s by hand, {mb:.3f} s through mlrecipe, "
          f"overhead {mb - ma:+.3f} s (target <= 0.3 s); {wa:.1f} s job: overhead {wb - wa:+.3f} s "
          f"({(wb - wa) / wa:+.2%}, target <= 2 %)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
