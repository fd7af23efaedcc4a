"""``validate --backend`` plans every step as ``--dry-run`` would: "valid" means "renders" there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.repo import BIN, EXAMPLES, cli_env

pytestmark = pytest.mark.integration  # starts real processes


def mlrecipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(home),
                          timeout=120)


def test_an_empty_image_is_invalid_for_kubernetes_and_says_what_to_set(mlhome: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text('image: ""\ntrain:\n  command: [python3, train.py]\n')
    chart = "training/pytorchjob-distributed"
    assert mlrecipe(mlhome, "validate", str(recipe), "--chart", chart).returncode == 0, "the spec itself is fine"
    done = mlrecipe(mlhome, "validate", str(recipe), "--chart", chart, "--backend", "kubernetes")
    assert done.returncode == 2
    assert f"{recipe}:1: image: required: set image to the container image" in done.stderr
    as_json = mlrecipe(mlhome, "validate", str(recipe), "--chart", chart, "-b", "kubernetes", "-o", "json")
    assert json.loads(as_json.stdout)["valid"] is False
    assert not (mlhome / "releases").exists(), "validation writes nothing"


def test_a_pipeline_is_planned_for_the_backend_given(mlhome: Path) -> None:
    for backend in ("kubernetes", "slurm", "local"):
        done = mlrecipe(mlhome, "validate", str(EXAMPLES / "quickstart" / "pipeline.yaml"), "-b", backend)
        assert done.returncode == 0, done.stderr
        assert f"planned for backend {backend}" in done.stdout
    assert not (mlhome / "releases").exists()
