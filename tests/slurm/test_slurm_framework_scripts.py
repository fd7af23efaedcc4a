"""On Slurm a step that selects ``framework:`` finds its chart's nested scripts at /etc/framework-scripts,
writable, on its node: the copy lives in the (shared) step directory and is bound there by the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.framework_recipe import CHART, shipped_scripts, write_recipe
from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]


def test_slurm_job_runs_a_nested_framework_script_from_etc(mlhome: Path, tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    done = cli(mlhome, "install", "fw", CHART, "-f", str(recipe), "-b", "slurm", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    log = cli(mlhome, "logs", "slurm://default/fw").stdout
    assert "scripts at /etc/framework-scripts: " + " ".join(shipped_scripts()) in log
    assert "written" in log
