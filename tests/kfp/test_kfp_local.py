"""The compiled file run by kfp.local's SubprocessRunner with --backend local: each task runs its step through
``mlrecipe install``, in dependency order; a failing step fails the run and the steps after it never start."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.kfp.kfp_env import PIPELINES, RUN_LOCAL, compile_kfp, kfp_python
from tests.repo import cli_env

pytestmark = pytest.mark.integration

TOKEN = "hf_kfp_local_token_7"
TOKEN_SET = f"square.process.env[0].name=HF_TOKEN,square.process.env[0].value={TOKEN}"


def _plain(run: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr without the colours of kfp.local's log lines."""
    return re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)


def _run(home: Path, compiled: Path, out: Path) -> subprocess.CompletedProcess[str]:
    out.mkdir()
    env = {**cli_env(home), "KFP_TEST_OUT": str(out), "HF_TOKEN": TOKEN}  # HF_TOKEN: what the Secret gives a pod
    return subprocess.run([kfp_python(), str(RUN_LOCAL), str(compiled), str(out.parent / "kfp-root"), "backend=local"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_steps_run_in_order_through_mlrecipe_install(mlhome: Path, tmp_path: Path) -> None:
    compiled = tmp_path / "local-kfp.yaml"
    result = compile_kfp(mlhome, PIPELINES / "local.yaml", compiled, "--set", TOKEN_SET)
    assert result.returncode == 0, result.stderr
    assert TOKEN not in compiled.read_text(encoding="utf-8")
    out = tmp_path / "out"
    run = _run(mlhome, compiled, out)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert (out / "prepare").read_text() == "3" and (out / "square").read_text() == "9"
    assert (out / "report").read_text() == "square 9"
    assert (out / "token").read_text() == TOKEN  # the credential reached the step, from the task's environment
    assert run.stdout.count("-m mlrecipe install kfp-local data-prep/data-process") == 3
    assert "Pipeline 'kfp-local' finished with status SUCCESS" in _plain(run)


def test_a_failing_step_fails_the_run(mlhome: Path, tmp_path: Path) -> None:
    compiled = tmp_path / "fail-kfp.yaml"
    result = compile_kfp(mlhome, PIPELINES / "local.yaml", compiled, "--set", "square.process.command={/bin/false}")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    run = _run(mlhome, compiled, out)
    assert run.returncode != 0
    assert "step square failed: mlrecipe install exited with code 1" in _plain(run)
    assert "Pipeline 'kfp-local' finished with status FAILURE" in _plain(run)
    assert (out / "prepare").read_text() == "3"
    assert not (out / "square").exists() and not (out / "report").exists()  # report never started
