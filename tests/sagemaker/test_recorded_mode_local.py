"""``-B mode=local`` given at ``install`` holds for ``resume``, ``status`` and ``uninstall`` of the release (issue 41
R11): they ran in mode aws and were exit 2 (no role_arn, no s3_prefix) until the user repeated it. A real local-mode
training job that fails at once, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_mode_local_is_remembered(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("pvc: []\ntrain:\n  command: [python3, -c, 'raise SystemExit(3)']\n", encoding="utf-8")
    install = cli(mlhome, "install", "r11", "training/pytorchjob-distributed", "-f", str(recipe), "-b", "sagemaker",
                  "-B", "mode=local", "-B", "max_run=600", timeout=180)
    assert install.returncode == 1, install.stdout + install.stderr  # the job ran, and failed
    state = json.loads((mlhome / "releases/sagemaker/default/r11/state.json").read_text(encoding="utf-8"))
    assert state["inputs"]["backend_opts"] == ["mode=local", "max_run=600"]
    status = cli(mlhome, "status", "sagemaker://default/r11", timeout=60)
    assert status.returncode == 0 and "failed" in status.stdout, status.stdout + status.stderr
    resume = cli(mlhome, "resume", "r11", timeout=180)
    assert resume.returncode == 1, resume.stdout + resume.stderr  # ran again in mode local, failed again
    assert "role_arn" not in resume.stderr and "mode aws" not in resume.stderr
    uninstall = cli(mlhome, "uninstall", "r11", timeout=120)
    assert uninstall.returncode == 0, uninstall.stdout + uninstall.stderr
    assert not (mlhome / "releases/sagemaker/default/r11").exists()
