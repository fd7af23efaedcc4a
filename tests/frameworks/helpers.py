"""Helpers the framework-script tests share: the environment the reference recipes run the scripts in, runners that
call the scripts as those recipes do (``python`` / ``accelerate launch`` / Ray), and checks of a finished run.

Fixtures built on these live in ``conftest.py``; test modules import this module, never a conftest or another test
module."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlrecipe.ports import free_port  # below the ephemeral range: for launchers' master ports
from tests.repo import BIN, REPO, private_tmp_env

ACCELERATE_SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / \
    "accelerate"
RAY_SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "raytrain" / "scripts" / "ray_train"

__all__ = ["ACCELERATE_SCRIPTS", "BIN", "RAY_SCRIPTS", "REPO", "Run", "assert_error", "free_port", "need_ml_stack",
           "need_ray", "ray_env", "ray_processes", "read_jsonl", "run_accelerate", "run_python", "script_env",
           "wait_until_no_ray_processes"]


def need_ml_stack() -> None:
    """Skip unless the libraries the accelerate scripts need are installed (the ``frameworks`` extra)."""
    for module in ("torch", "transformers", "accelerate", "peft", "datasets", "safetensors", "tokenizers"):
        pytest.importorskip(module)


def need_ray() -> None:
    """Skip unless Ray Train (and psutil, to find its processes) are installed besides the ML stack."""
    need_ml_stack()
    pytest.importorskip("ray.train.torch")
    pytest.importorskip("psutil")


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON Lines file (blank lines ignored)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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


def assert_error(run: Run, *needles: str, status: int = 1) -> None:
    """The run failed with ``status`` and one ``error:`` line (containing every needle), no traceback."""
    assert run.returncode == status, run.describe()
    line = run.last_error_line
    assert line.startswith("error: ") or ": error: " in line, run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


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
    proc = _run_group([python or sys.executable, script, *args], scripts, script_env(home, **env), timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


#: Marks every process one :func:`_run_group` call starts, so that all of them can be found and killed.
GROUP_VAR = "MLRECIPE_TEST_GROUP"


def _run_group(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a new session, with a ``TMPDIR`` of its own; on timeout every process it started is
    killed, its process group and those that left it: torch's elastic agent starts each rank in a session of its
    own, and a rank left waiting in a collective holds the output pipes open, so that reading them never ended."""
    token = os.urandom(8).hex()
    with private_tmp_env({**env, GROUP_VAR: token}) as private, \
            subprocess.Popen(cmd, cwd=cwd, env=private, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, token)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=60)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(pid: int, token: str) -> None:
    """SIGKILL the process group ``pid`` leads and every process whose environment carries ``token``."""
    import psutil

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(GROUP_VAR) == token:
                proc.kill()


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
    proc = _run_group(cmd, scripts, script_env(home, **env), timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def ray_env(ray_tmp: Path, **extra: str) -> dict[str, str]:
    """A light local Ray: 2 CPUs, a small object store, no retries of a failed run, no dashboard (the script)."""
    return {"RAY_TMPDIR": str(ray_tmp), "MLRECIPE_RAY_NUM_CPUS": "2", "MLRECIPE_RAY_MAX_FAILURES": "0",
            "MLRECIPE_RAY_OBJECT_STORE_BYTES": str(100 * 1024 * 1024), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ADDRESS": "", **extra}


def ray_processes(ray_tmp: Path) -> list[str]:
    """Processes started for a module's Ray (its temp dir in their command line or environment)."""
    import psutil

    marker, found = str(ray_tmp), []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if marker in cmdline or proc.environ().get("RAY_TMPDIR") == marker:
                found.append(f"{proc.pid} {cmdline[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_until_no_ray_processes(ray_tmp: Path, timeout: float = 20.0) -> list[str]:
    """The Ray processes still alive after waiting up to ``timeout`` seconds for them to go (none: an empty list)."""
    deadline = time.monotonic() + timeout
    left = ray_processes(ray_tmp)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ray_processes(ray_tmp)
    return left
