"""A recipe that does all its work in ``pre_script`` (no command), as the reference's data preparation does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.repo import BIN, cli_env

RECIPE = """\
image: python:3.11
pvc: []
pre_script:
  - echo "prepared by pre_script on $HOSTNAME"
  - test -n "$PET_NODE_RANK"
process:
  env:
    - {name: GREETING, value: hello}
"""


def mlrecipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(home),
                          timeout=300)


@pytest.mark.integration
def test_pre_script_only_recipe_runs_locally_and_renders_everywhere(mlhome: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "prep.yaml"
    recipe.write_text(RECIPE)
    chart = "data-prep/data-process"
    assert mlrecipe(mlhome, "validate", str(recipe), "--chart", chart).returncode == 0
    done = mlrecipe(mlhome, "install", "prep", chart, "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prepared by pre_script on prep-" in mlrecipe(mlhome, "logs", "prep").stdout
    k8s = mlrecipe(mlhome, "template", "prep", chart, "-f", str(recipe), "-b", "kubernetes")
    assert k8s.returncode == 0, k8s.stderr
    job = next(d for d in yaml.safe_load_all(k8s.stdout) if d and d.get("kind") == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"], "the runtime runs the pre_script"
    assert "prepared by pre_script" in k8s.stdout
    assert mlrecipe(mlhome, "template", "prep", chart, "-f", str(recipe), "-b", "slurm").returncode == 0
