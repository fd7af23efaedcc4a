"""``validate`` warns (exit 0, file and line named) about a ``framework:`` the chart does not ship and about
scripts a recipe runs from /etc/framework-scripts that the framework's folder lacks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from mlrecipe.spec.catalog import CATALOG
from tests.repo import BIN, REPO

CHART = "training/pytorchjob-distributed"
RECIPE = """\
image: nvcr.io/nvidia/pytorch:25.10-py3
framework: {framework}
pre_script:
  - cd $SCRIPTS_DIR
train:
  command: [accelerate, launch, {script}]
  args: [--hf_model_id=x]
"""


def _validate(tmp_path: Path, framework: str, script: str, *extra: str) -> subprocess.CompletedProcess[str]:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(framework=framework, script=script))
    return subprocess.run([str(BIN / "mlrecipe"), "validate", str(recipe), "--chart", CHART, *extra],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_a_shipped_framework_and_script_validate_without_warning(tmp_path: Path) -> None:
    done = _validate(tmp_path, "accelerate", "text/peft_accelerate.py")
    assert done.returncode == 0 and "valid" in done.stdout
    assert "warning" not in done.stderr


@pytest.mark.integration
def test_an_unknown_framework_is_a_warning_with_file_line_and_a_suggestion(tmp_path: Path) -> None:
    done = _validate(tmp_path, "acelerate", "text/peft_accelerate.py")
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"warning: {tmp_path / 'recipe.yaml'}:2: framework: ")
    assert "no scripts/acelerate/" in line and "did you mean 'accelerate'?" in line


@pytest.mark.integration
def test_a_script_the_framework_lacks_is_a_warning(tmp_path: Path) -> None:
    done = _validate(tmp_path, "accelerate", "text/sft_accelerate.py", "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["valid"] is True
    (warning,) = report["warnings"]
    assert warning["line"] == 6 and warning["path"] == "train.command"
    assert "text/sft_accelerate.py (did you mean text/peft_accelerate.py?)" in warning["message"]


@pytest.mark.parametrize("chart", sorted(CATALOG))
def test_the_catalog_default_framework_is_the_charts(chart: str) -> None:
    values = yaml.safe_load((REPO / "charts" / "machine-learning" / chart / "values.yaml").read_text())
    assert CATALOG[chart].default_framework == (values.get("framework") or None)
