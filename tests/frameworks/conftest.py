"""Fixtures for the framework-script tests: the scripts copied the way the chart's init container copies them,
a tiny local model, local data, and a runner that calls the scripts as the reference recipes do.

In-process tests import the package (``mlrecipe_scripts.*``); subprocess runs use the chart's generated tree, whose
entry files import the tree's own copy of the package."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks import tiny

REPO = Path(__file__).resolve().parents[2]
ACCELERATE_SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / \
    "accelerate"
BIN = Path(sys.executable).parent


def need_ml_stack() -> None:
    """Skip unless the libraries the accelerate scripts need are installed (the ``frameworks`` extra)."""
    for module in ("torch", "transformers", "accelerate", "peft", "datasets", "safetensors", "tokenizers"):
        pytest.importorskip(module)


@pytest.fixture(scope="session")
def scripts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``scripts/accelerate`` (as the init container makes ``/etc/framework-scripts``)."""
    target = tmp_path_factory.mktemp("etc") / "framework-scripts"
    shutil.copytree(ACCELERATE_SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model directory: 2-layer Llama (hidden 64) + a BPE tokenizer trained here."""
    need_ml_stack()
    return tiny.make_model(tmp_path_factory.mktemp("pretrained-models") / "tiny-llama")


@pytest.fixture(scope="session")
def instruction_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local dataset directory (``data.jsonl``, 300 alpaca-style rows) usable as ``--hfdc_dataset_name``."""
    return tiny.make_instruction_dataset(tmp_path_factory.mktemp("datasets-src") / "instructions")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Run:
    """A finished script run."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def last_error_line(self) -> str:
        """The last non-empty stderr line."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def describe(self) -> str:
        """Tail of the output, for assertion messages."""
        return f"rc={self.returncode}\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-5000:]}"


def script_env(home: Path, **extra: str) -> dict[str, str]:
    """The recipe environment on this CPU box: ``HOME`` per release, CPU accelerate, one thread, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLRECIPE_", "ACCELERATE_", "PET_"))}
    env.update(HOME=str(home), ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               MLRECIPE_DATA_POLL_SECONDS="0.5", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env.update(extra)
    return env


def run_python(scripts: Path, script: str, args: list[str], home: Path, timeout: int = 300,
               python: str | None = None, **env: str) -> Run:
    """``cd $SCRIPTS_DIR && python <script> <args>``."""
    start = time.monotonic()
    proc = subprocess.run([python or sys.executable, script, *args], cwd=scripts, env=script_env(home, **env),
                          capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def run_accelerate(scripts: Path, script: str, args: list[str], home: Path, processes: int = 2,
                   timeout: int = 300, **env: str) -> Run:
    """``cd $SCRIPTS_DIR && accelerate launch --multi_gpu --num_processes N <script> <args>`` on CPU (gloo)."""
    launcher = [str(BIN / "accelerate")] if (BIN / "accelerate").exists() else \
        [sys.executable, "-m", "accelerate.commands.launch"]
    if launcher[0].endswith("accelerate"):
        launcher.append("launch")
    topology = ["--multi_gpu", "--num_processes", str(processes)] if processes > 1 else ["--num_processes", "1"]
    cmd = [*launcher, *topology, "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), script, *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=scripts, env=script_env(home, **env), capture_output=True, text=True,
                          timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


@pytest.fixture(scope="session")
def preference_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local dataset directory (``pairs.jsonl``, 120 prompt / chosen / rejected rows) for ``--rmdc_dataset_name``."""
    from tests.frameworks import preference_data

    return preference_data.make_preference_dataset(tmp_path_factory.mktemp("datasets-src") / "preferences")
