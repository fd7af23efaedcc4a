"""On the local backend a step that selects ``framework:`` finds its chart's nested scripts at
/etc/framework-scripts, writable, and ``cd $SCRIPTS_DIR`` works unchanged; the chart's own copy is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.framework_recipe import CHART, shipped_scripts, write_recipe
from tests.integration.helpers import cli

pytestmark = pytest.mark.integration


def test_local_step_runs_a_nested_framework_script_from_etc(mlhome: Path, tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    plan = cli(mlhome, "template", "fw", CHART, "-f", str(recipe), "-b", "local")
    assert plan.returncode == 0, plan.stderr
    assert "bound at /etc/framework-scripts" in plan.stdout
    done = cli(mlhome, "install", "fw", CHART, "-f", str(recipe), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    log = cli(mlhome, "logs", "fw").stdout
    assert "scripts at /etc/framework-scripts: " + " ".join(shipped_scripts()) in log
    assert "written" in log
    copy = next(mlhome.glob("releases/local/default/fw/steps/*/framework-scripts"))
    assert (copy / "tb_logs" / "probe").read_text().strip() == "written"
    assert not (Path(__file__).resolve().parents[2] / "charts" / "machine-learning" / CHART / "scripts" /
                "accelerate" / "tb_logs").exists()
