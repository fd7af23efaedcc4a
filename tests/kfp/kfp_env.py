"""Where the tests find kfp: this interpreter when it has kfp, else the checkout's .venv-kfp (``make kfp-env``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repo import BIN, REPO, cli_env

HERE = Path(__file__).resolve().parent
PIPELINES = HERE / "pipelines"
RUN_LOCAL = HERE / "kfp_local_run.py"
IMAGE = "registry.example.com/mlrecipe:test"


def kfp_python() -> str:
    """An interpreter with mlrecipe[kfp]; skips the test (saying why) when there is none."""
    if importlib.util.find_spec("kfp") is not None:
        return sys.executable
    venv = REPO / ".venv-kfp" / "bin" / "python"
    if not venv.is_file():
        pytest.skip("kfp is not installed here and .venv-kfp is missing: make kfp-env (make test builds it)")
    return str(venv)


def compile_kfp(home: Path, pipeline: Path, output: Path, *extra: str,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mlrecipe compile kfp PIPELINE -o OUTPUT --image IMAGE EXTRA...`` with this environment's CLI."""
    kfp_python()
    argv = [str(BIN / "mlrecipe"), "compile", "kfp", str(pipeline), "-o", str(output), "--image", IMAGE, *extra]
    return subprocess.run(argv, env={**cli_env(home), **(env or {})}, capture_output=True, text=True, timeout=120,
                          check=False)
