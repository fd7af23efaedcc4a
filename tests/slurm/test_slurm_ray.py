"""RayJob charts on Slurm: the head and the driver on the batch host, one Ray worker node per allocated node
started with ``srun ... ray start --block``, the job's command as the driver; nothing of Ray is left after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]
JOB = Path(__file__).resolve().parents[1] / "integration" / "assets" / "ray_job.py"


def test_ray_data_job_spans_the_allocated_nodes(mlhome: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray.data", reason="Ray runs from the frameworks extra (pip install '.[frameworks]')")
    recipe = tmp_path / "ray.yaml"
    recipe.write_text(f"""\
image: rayproject/ray:2.60.0
resources:
  nnodes: 2
  requests: {{cpu: "1"}}
process:
  env:
    - {{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}
  command: [python3, {JOB}, data, --out $HOME/report.json]
""")
    done = cli(mlhome, "install", "rd", "data-prep/ray-data-process", "-f", str(recipe), "-b", "slurm", timeout=400)
    log = cli(mlhome, "logs", "slurm://default/rd").stdout
    assert done.returncode == 0, done.stdout[-2000:] + log[-3000:]
    report = json.loads((mlhome / "volumes" / "pv-efs" / "home" / "rd" / "report.json").read_text())
    assert report["nodes"] == 3 and report["task_nodes"] == 2, report
    assert report["sum_of_squares"] == sum(i * i for i in range(1000))
    assert "2 x workers (1 CPU, 0 GPU each)" in log and "Ray cluster stopped" in log
