"""Training speed of the accelerate LoRA SFT script vs a minimal hand-written ``transformers.Trainer``, same run.

What runs (all on CPU, from a copy of ``scripts/accelerate`` as the chart's init container makes it, with the
environment of ``tests/frameworks/helpers.py::script_env``: ``ACCELERATE_USE_CPU=1``, ``OMP_NUM_THREADS=1``,
``HF_HUB_OFFLINE=1`` ...), on the tiny 2-layer Llama and the 300 instruction rows of ``tests/frameworks/tiny.py``,
built once in a temporary directory:

* ``script``: ``text/peft_accelerate.py --hf_model_id=tiny/llama --model_path=<tiny model>
  --hfdc_dataset_name=<local dataset> --max_steps=N ...`` (the data are prepared by an untimed warm-up run, then
  reused; ``--eval_steps`` is set past ``--max_steps`` so that no evaluation falls inside the timed window);
* ``baseline``: ``benchmarks/assets/sft_worker.py baseline``: the same model, the same LoRA config (the script's
  defaults, read from its ``ScriptArguments``, unless given here), the same training rows tokenized the same way
  (checked row for row against the script's ``SFTDataset``), the same batch size, accumulation, sequence length,
  precision (fp32), learning rate / warm-up, weight decay (the script's default, passed to both sides), logging
  cadence, dataloader workers and seed, written the way one
  would by hand: rows pre-tokenized once, ``DataCollatorForSeq2Seq`` with dynamic padding, no evaluation, no
  saving, ``report_to="none"``, default ``TrainingArguments`` otherwise (so no activation checkpointing);
* ``baseline+ckpt``: the same baseline with the script's activation checkpointing (non-reentrant): the
  like-for-like comparison for a script that checkpoints by design (a memory setting for the real 8B-14B models);
* ``baseline+flops_once``: the baseline whose Trainer counts the model's parameters for its FLOs estimate once,
  as the script's Trainer does (the plain Trainer recounts them at every step): the script / it ratio is the cost
  of the script's features alone.

Both sides are timed by the same Trainer callback (``sft_worker.StepTimer``, added to the script's Trainer by
patching ``Trainer.__init__`` from outside; the script itself is not changed): samples/s = samples in the optimizer
steps after the first ``--skip`` ones / time from the end of step ``--skip`` to the end of the last step, so model
loading, data preparation, the first steps, the final evaluation and saving are excluded equally. The ratios are
taken per round (runs next to each other in time) and their median is the figure. Also shown: the same samples
per CPU second of the training process (rank 0; ``time.process_time()`` over the same window), which other load
on a shared machine barely moves (it leaves out waiting, and DataLoader worker processes when
``--num-workers`` > 0), and the Trainer's own ``train_samples_per_second`` (whole ``train()``, including the
first steps and, for the script, the evaluation it runs after the last step).

Sections, each in rounds whose order rotates (A B C, B C A, ...), after one untimed warm-up run (the script run
that prepares the data):

1. one process (``python``): script vs baseline vs baseline+flops_once vs baseline+ckpt, ``--repeats`` rounds (0
   to skip); per-round ratios script / baseline (target >= 0.95), script / baseline+flops_once and
   script+ckpt / baseline+ckpt, medians and spread;
2. where the rest of a gap comes from (``--ablation-repeats`` rounds, 0 to skip): the baseline with one more of
   the script's CPU settings at a time (tokenization per item in ``__getitem__``, TensorBoard, ``use_cache=False``,
   ``remove_unused_columns=False``, the FLOs estimate's parameter count taken once; see ``sft_worker.KNOBS``) and
   with all of them, each as a ratio to the baseline run of the same round;
3. two processes (``accelerate launch --multi_gpu --num_processes 2`` on CPU, gloo, as the tests run it): the
   same variants as 1., ``--ddp-repeats`` rounds (0 to skip).

The script prints figures and exits 0; it asserts no target (it exits 1 only when a run fails).

Run (about 7 minutes with the defaults on the 2-core machine)::

    .venv/bin/python benchmarks/bench_accelerate_sft.py
    .venv/bin/python benchmarks/bench_accelerate_sft.py --steps 150 --repeats 3 --ablation-repeats 0 --ddp-repeats 0
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from mlrecipe.ports import free_port

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / "accelerate"
SCRIPT = "text/peft_accelerate.py"
WORKER = REPO / "benchmarks" / "assets" / "sft_worker.py"
BIN = Path(sys.executable).parent
MODEL_ID = "tiny/llama"
#: the script's CPU settings tried on top of the baseline (sft_worker.KNOBS, not imported: it imports
#: transformers); left out: ``checkpointing``, ``input_grads`` and ``pad8``, which the script uses with CUDA only
ABLATION_KNOBS = ("tokenize", "tensorboard", "no_cache", "keep_columns", "flops_once")
KNOB_TEXT = {
    "checkpointing": "activation checkpointing (non-reentrant)",
    "input_grads": "enable_input_require_grads() alone",
    "pad8": "collator pads to a multiple of 8",
    "tokenize": "tokenization per item (__getitem__)",
    "tensorboard": "report_to tensorboard",
    "no_cache": "use_cache=False",
    "keep_columns": "remove_unused_columns=False",
    "flops_once": "FLOs estimate counts parameters once",
}


class RunFailed(RuntimeError):
    """A run exited non-zero, ran past its time limit or wrote no timings."""


@dataclass(frozen=True)
class Variant:
    """What one run trains: the framework script, or the baseline with some of the script's settings."""

    side: str  #: "script" or "baseline"
    knobs: tuple[str, ...] = ()  #: the script: only "checkpointing" (``--gradient_checkpointing=true``)

    @property
    def name(self) -> str:
        if not self.knobs:
            return self.side
        if set(self.knobs) == set(ABLATION_KNOBS):
            return f"{self.side}+all"
        return f"{self.side}+" + "+".join("ckpt" if k == "checkpointing" else k for k in self.knobs)


SCRIPT_V = Variant("script")
SCRIPT_CKPT_V = Variant("script", ("checkpointing",))
BASE_V = Variant("baseline")
CKPT_V = Variant("baseline", ("checkpointing",))
FLOPS_V = Variant("baseline", ("flops_once",))


@dataclass
class Run:
    """One timed run, from the StepTimer record."""

    variant: Variant
    samples_per_s: float  #: in the window (end of step ``skip`` -> end of the last step), wall clock
    cpu_samples_per_s: float  #: the same samples per CPU second of the (rank 0) training process
    trainer_samples_per_s: float  #: the Trainer's train_samples_per_second (whole train())
    window_s: float
    window_steps: int
    samples_per_step: int
    wall_s: float
    events_in_window: list[str]
    checkpointing: bool


@dataclass
class Bench:
    """Shared settings and paths."""

    args: argparse.Namespace
    root: Path
    scripts: Path
    model: Path
    dataset: Path
    home: Path
    lora: dict[str, Any]
    env: dict[str, str]
    train_jsonl: Path | None = None
    counter: int = 0
    timeout: float = 600.0
    weight_decay: float = 0.0  #: AdamW's, the script's default, given to both sides

    def common(self) -> dict[str, Any]:
        a = self.args
        return {"max_steps": a.steps, "per_device_train_batch_size": a.batch,
                "gradient_accumulation_steps": a.grad_accum, "max_seq_length": a.max_seq_length,
                "learning_rate": a.learning_rate, "warmup_steps": a.warmup_steps, "logging_steps": a.logging_steps,
                "num_workers": a.num_workers, "seed": 42, "weight_decay": self.weight_decay}

    def script_argv(self, out: Path, knobs: Sequence[str] = ()) -> list[str]:
        values = {**self.common(), **self.lora, "eval_steps": self.args.steps + 1000}
        argv = [f"--hf_model_id={MODEL_ID}", f"--model_path={self.model}", f"--hfdc_dataset_name={self.dataset}",
                f"--output_dir={out}"]
        if "checkpointing" in knobs:
            argv.append("--gradient_checkpointing=true")
        return argv + [f"--{k}={v}" for k, v in values.items()]

    def baseline_argv(self, out: Path, knobs: Sequence[str]) -> list[str]:
        assert self.train_jsonl is not None
        values = {**self.common(), **self.lora}
        argv = [f"--model={self.model}", f"--train={self.train_jsonl}", f"--output={out}"]
        argv += [f"--{k}={v}" for k, v in values.items()]
        for knob in knobs:
            argv += ["--like", knob]
        return argv

    def run(self, variant: Variant, processes: int) -> Run:
        self.counter += 1
        out = self.root / "runs" / f"{self.counter:03d}-{variant.name}"
        stamp = out.with_suffix(".json")
        log = out.with_suffix(".log")
        if variant.side == "script":
            tail = [str(WORKER), "script", SCRIPT, *self.script_argv(out, variant.knobs)]
        else:
            tail = [str(WORKER), "baseline", *self.baseline_argv(out, variant.knobs)]
        if processes > 1:
            launcher = [str(BIN / "accelerate"), "launch"] if (BIN / "accelerate").exists() else \
                [sys.executable, "-m", "accelerate.commands.launch"]
            argv = [*launcher, "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
                    *tail]
        else:
            argv = [sys.executable, *tail]
        env = dict(self.env, SFT_BENCH_STAMP=str(stamp), MLRECIPE_METRICS_FILE=str(out.with_suffix(".metrics")))
        out.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(log, "wb") as fh:
            proc = subprocess.Popen(argv, cwd=self.scripts, env=env, stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                code = None
        wall = time.perf_counter() - start
        if code != 0 or not stamp.exists():
            lines = log.read_text(errors="replace").splitlines()[-25:]
            why = "ran past its time limit" if code is None else f"exited with status {code}"
            raise RunFailed(f"{variant.name}: {' '.join(argv)} {why}; last lines:\n  " + "\n  ".join(lines))
        record = json.loads(stamp.read_text())
        if not self.args.keep:
            shutil.rmtree(out, ignore_errors=True)
        return to_run(variant, record, self.args.skip, wall)


def to_run(variant: Variant, record: dict[str, Any], skip: int, wall: float) -> Run:
    ends = record["step_ends"]
    if len(ends) <= skip + 1:
        raise RunFailed(f"{variant.name}: only {len(ends)} optimizer steps timed; raise --steps above --skip")
    cpu = record["step_cpu"]
    first, last = ends[skip - 1] if skip > 0 else record["train_begin"], ends[-1]
    cpu_first = cpu[skip - 1] if skip > 0 else record["train_begin_cpu"]
    steps = len(ends) - skip
    per_step = int(record["samples_per_step"])
    inside = [f"{kind}@{step}" for kind, step, t in record.get("events", []) if first < t < last]
    trainer = record.get("trainer", {}).get("train_samples_per_second", float("nan"))
    return Run(variant, steps * per_step / (last - first), steps * per_step / max(cpu[-1] - cpu_first, 1e-9),
               float(trainer), last - first, steps, per_step, wall, inside, bool(record.get("checkpointing")))


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the run's process group (accelerate launch and its workers), SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def script_env(home: Path) -> dict[str, str]:
    """As ``tests/frameworks/helpers.py::script_env``: HOME per release, CPU accelerate, one thread, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLRECIPE_", "ACCELERATE_", "PET_"))}
    env.update(HOME=str(home), ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               MLRECIPE_DATA_POLL_SECONDS="0.5", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def script_defaults(scripts: Path) -> Any:
    """The script's ``ScriptArguments()`` (its module imports only the standard library at import time)."""
    for p in (str(scripts / "text"), str(scripts)):
        if p not in sys.path:
            sys.path.insert(0, p)
    spec = importlib.util.spec_from_file_location("bench_peft_accelerate", scripts / SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.ScriptArguments()


def build_inputs(root: Path) -> tuple[Path, Path]:
    """The tiny model and the local instruction dataset (in a child process: torch stays out of this one)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from tests.frameworks import tiny; tiny.make_model(Path(sys.argv[2])); "
            "tiny.make_instruction_dataset(Path(sys.argv[3]))")
    model, data = root / "pretrained-models" / "tiny-llama", root / "datasets-src" / "instructions"
    subprocess.run([sys.executable, "-c", code, str(REPO), str(model), str(data)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=script_env(root))
    return model, data


# --------------------------------------------------------------------------------------------------------------
# rounds and reports


def rounds(bench: Bench, variants: Sequence[Variant], repeats: int, processes: int, label: str
           ) -> list[dict[Variant, Run]]:
    """``repeats`` rounds of every variant, the order rotated by one each round; every run printed as it ends."""
    out: list[dict[Variant, Run]] = []
    for i in range(repeats):
        order = list(variants[i % len(variants):]) + list(variants[:i % len(variants)])
        done: dict[Variant, Run] = {}
        for v in order:
            run = bench.run(v, processes)
            done[v] = run
            extra = f"  inside the window: {', '.join(run.events_in_window)}" if run.events_in_window else ""
            print(f"  {label} {i + 1}/{repeats} {v.name:<28} {run.samples_per_s:7.1f} samples/s, "
                  f"{run.cpu_samples_per_s:7.1f} per CPU s ({run.window_steps} steps x {run.samples_per_step} in "
                  f"{run.window_s:.2f} s; Trainer {run.trainer_samples_per_s:.1f}; run {run.wall_s:.1f} s; load "
                  f"{os.getloadavg()[0]:.2f}){extra}", flush=True)
        out.append(done)
    return out


def fmt_spread(values: Sequence[float], digits: int = 1, pct: bool = False) -> str:
    if pct:
        return (f"{statistics.median(values) - 1:+7.1%}  [{min(values) - 1:+.1%} .. {max(values) - 1:+.1%}]")
    return f"{statistics.median(values):8.{digits}f}  [{min(values):.{digits}f} .. {max(values):.{digits}f}]"


def speed_table(results: list[dict[Variant, Run]], variants: Sequence[Variant]) -> None:
    width = max(len(v.name) for v in variants) + 1
    print(f"  {'variant':<{width}} {'samples/s, median [min .. max]':<32} {'per CPU second of rank 0':<32} "
          "Trainer's train_samples_per_second")
    for v in variants:
        sps = [r[v].samples_per_s for r in results]
        cpu = [r[v].cpu_samples_per_s for r in results]
        trainer = [r[v].trainer_samples_per_s for r in results]
        print(f"  {v.name:<{width}} {fmt_spread(sps):<32} {fmt_spread(cpu):<32} {fmt_spread(trainer)}")


def ratio_lines(results: list[dict[Variant, Run]], num: Variant, den: Variant, target: float | None = None
                ) -> tuple[float, float]:
    """Print num / den: per-round ratios of wall-clock samples/s (median, range), the ratio of the medians, the
    per-round ratios of samples per CPU second (insensitive to other load on the machine) and of the Trainer's
    own figures; returns the medians of the per-round ratios (wall clock, CPU time)."""
    def per_round(attr: str) -> list[float]:
        return [getattr(r[num], attr) / getattr(r[den], attr) for r in results]

    wall, cpu, trainer = per_round("samples_per_s"), per_round("cpu_samples_per_s"), \
        per_round("trainer_samples_per_s")
    of_medians = statistics.median(r[num].samples_per_s for r in results) / \
        statistics.median(r[den].samples_per_s for r in results)
    goal = f"  (target >= {target:.2f}: {'met' if statistics.median(wall) >= target else 'NOT met'})" \
        if target is not None else ""
    print(f"  {num.name} / {den.name}: {statistics.median(wall):.3f} [{min(wall):.3f} .. {max(wall):.3f}]"
          f"{goal}; ratio of medians {of_medians:.3f}; per CPU second {statistics.median(cpu):.3f} "
          f"[{min(cpu):.3f} .. {max(cpu):.3f}]; Trainer's figures {statistics.median(trainer):.3f}")
    return statistics.median(wall), statistics.median(cpu)


def section_speed(bench: Bench, repeats: int, processes: int, title: str) -> dict[str, tuple[float, float]]:
    variants = (SCRIPT_V, BASE_V, FLOPS_V, SCRIPT_CKPT_V, CKPT_V)
    print(f"\n{title}", flush=True)
    res = rounds(bench, variants, repeats, processes, "round")
    speed_table(res, variants)
    ratio = ratio_lines(res, SCRIPT_V, BASE_V, target=0.95)
    ratio_lines(res, SCRIPT_V, FLOPS_V)
    like = ratio_lines(res, SCRIPT_CKPT_V, CKPT_V, target=0.95)
    ratio_lines(res, CKPT_V, BASE_V)
    return {"script/baseline": ratio, "script+ckpt/baseline+ckpt": like}


def section_ablation(bench: Bench, repeats: int) -> None:
    ref = BASE_V
    extra = [Variant("baseline", (k,)) for k in ABLATION_KNOBS]
    every = Variant("baseline", ABLATION_KNOBS)
    variants = (ref, *extra, every, SCRIPT_V)
    print(f"\n[2] where the rest of the gap comes from: the baseline with one more of the script's CPU settings at "
          f"a time, one process ({repeats} rounds of {len(variants)} runs, order rotated)", flush=True)
    res = rounds(bench, variants, repeats, 1, "round")
    print(f"  {'setting (baseline + it)':<42} {'effect on samples/s vs baseline':<38} per CPU second")
    print(f"  {'':<42} {'median [min .. max]':<38} median [min .. max]")
    for v in (*extra, every, SCRIPT_V):
        ratios = [r[v].samples_per_s / r[ref].samples_per_s for r in res]
        cpu = [r[v].cpu_samples_per_s / r[ref].cpu_samples_per_s for r in res]
        text = "all of the above" if v is every else "the script itself" if v is SCRIPT_V else KNOB_TEXT[v.knobs[0]]
        print(f"  {text:<42} {fmt_spread(ratios, pct=True):<38} {fmt_spread(cpu, pct=True)}")
    ratio_lines(res, SCRIPT_V, every)


def header(args: argparse.Namespace, lora: dict[str, Any]) -> None:
    load = os.getloadavg()
    versions = ", ".join(f"{d} {version(d)}" for d in ("torch", "transformers", "peft", "accelerate"))
    print("== bench_accelerate_sft: samples/s of text/peft_accelerate.py vs a minimal hand-written "
          "transformers.Trainer LoRA SFT ==")
    busy = "" if load[0] < 1.0 else (" (other processes are running: the wall-clock figures will be noisy, "
                                     "the per-CPU-second ones much less)")
    print(f"machine:  {os.cpu_count()} CPU(s) ({cpu_model()}); load average {load[0]:.2f}{busy}")
    print(f"software: python {platform.python_version()}, {versions}")
    print(f"model:    tiny 2-layer Llama (hidden 64), fp32 on CPU, OMP_NUM_THREADS=1; LoRA r={lora['lora_rank']} "
          f"alpha={lora['lora_alpha']} dropout={lora['lora_dropout']} targets={lora['lora_target_modules']}")
    print(f"training: {args.steps} optimizer steps, per-device batch {args.batch} x accumulation {args.grad_accum}, "
          f"max_seq_length {args.max_seq_length}, logging every {args.logging_steps} steps, "
          f"dataloader workers {args.num_workers}; timed from the end of step {args.skip} to the end of the last")
    print(f"started:  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run (default 300)")
    p.add_argument("--skip", type=int, default=20, help="first steps left out of the timed window (default 20)")
    p.add_argument("--repeats", type=int, default=5,
                   help="rounds of the one-process comparison (default 5; 0: skip)")
    p.add_argument("--ablation-repeats", type=int, default=2, help="rounds of the ablation (default 2; 0: skip)")
    p.add_argument("--ddp-repeats", type=int, default=2,
                   help="rounds under accelerate launch --num_processes 2 (default 2; 0: skip)")
    p.add_argument("--batch", type=int, default=4, help="per-device train batch size (default 4, as the tests)")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps (default 1)")
    p.add_argument("--max-seq-length", type=int, default=128, help="default 128 (rows are ~28 tokens)")
    p.add_argument("--logging-steps", type=int, default=5, help="default 5")
    p.add_argument("--num-workers", type=int, default=0, help="dataloader workers (default 0, as the tests)")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--lora-rank", type=int, default=None, help="default: the script's")
    p.add_argument("--lora-alpha", type=int, default=None, help="default: the script's")
    p.add_argument("--lora-dropout", type=float, default=None, help="default: the script's")
    p.add_argument("--lora-target-modules", default=None, help="comma list; default: the script's")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, timings)")
    args = p.parse_args(argv)
    if args.steps <= args.skip + 1:
        p.error("--steps must be larger than --skip + 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    root = Path(tempfile.mkdtemp(prefix="mlrecipe-bench-sft-"))
    try:
        scripts = root / "etc" / "framework-scripts"
        shutil.copytree(SCRIPTS, scripts, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        defaults = script_defaults(scripts)
        lora = {"lora_rank": args.lora_rank if args.lora_rank is not None else defaults.lora_rank,
                "lora_alpha": args.lora_alpha if args.lora_alpha is not None else defaults.lora_alpha,
                "lora_dropout": args.lora_dropout if args.lora_dropout is not None else defaults.lora_dropout,
                "lora_target_modules": args.lora_target_modules or ",".join(defaults.lora_target_modules)}
        header(args, lora)
        model, dataset = build_inputs(root)
        home = root / "home"
        bench = Bench(args, root, scripts, model, dataset, home, lora, script_env(home),
                      weight_decay=defaults.weight_decay)
        return measure(bench)
    except RunFailed as exc:
        print(f"\nrun failed, no figures: {exc}", flush=True)
        return 1
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def measure(bench: Bench) -> int:
    args = bench.args
    # the first script run prepares the data under $HOME/datasets (untimed), the baseline then reads the same rows
    bench.run(SCRIPT_V, 1)
    [ready] = list(bench.home.joinpath("datasets").rglob(".data_ready"))
    bench.train_jsonl = ready.parent / "training.jsonl"
    check = subprocess.run([sys.executable, str(WORKER), "check", f"--scripts={bench.scripts}",
                            f"--model={bench.model}", f"--train={bench.train_jsonl}",
                            f"--max_seq_length={args.max_seq_length}"], cwd=bench.scripts, env=bench.env,
                           capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise RunFailed(f"data check failed:\n{check.stderr[-3000:]}")
    same = json.loads(check.stdout.strip().splitlines()[-1])
    print(f"data:     {same['rows']} training rows, {same['tokens']} tokens; baseline encoding == script's "
          f"SFTDataset: {'yes, every row' if not same['differ'] else 'NO, rows ' + str(same['differ'])}",
          flush=True)

    summary: dict[str, tuple[float, float]] = {}
    if args.repeats > 0:
        summary = section_speed(bench, args.repeats, 1, f"[1] one process (python), {args.repeats} rounds of "
                                "script / baseline / baseline+flops_once / +ckpt (order rotated)")
    if args.ablation_repeats > 0:
        section_ablation(bench, args.ablation_repeats)
    ddp: dict[str, tuple[float, float]] = {}
    if args.ddp_repeats > 0:
        ddp = section_speed(bench, args.ddp_repeats, 2,
                            f"[3] two processes (accelerate launch --multi_gpu --num_processes 2, CPU, gloo), "
                            f"{args.ddp_repeats} rounds (samples/s: both processes together)")
    parts = [f"{label}: script / baseline {r['script/baseline'][0]:.3f} ({r['script/baseline'][1]:.3f} per CPU "
             f"second), script+ckpt / baseline+ckpt {r['script+ckpt/baseline+ckpt'][0]:.3f} "
             f"({r['script+ckpt/baseline+ckpt'][1]:.3f})" for label, r in (("1 process", summary), ("2 processes", ddp))
             if r]
    if parts:
        print(f"\nsummary (medians of per-round ratios of samples/s; target script / baseline >= 0.95): "
              f"{'; '.join(parts)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
