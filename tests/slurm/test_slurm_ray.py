"""RayJob charts on Slurm: the head on the batch host, one Ray worker node per allocated node started with
``srun ... ray start --block``, the job's command submitted to the head as a Ray job (the Ray Jobs API) where the
Ray that runs it has its dashboard (``ray[default]``), else run as the driver; nothing of Ray is left after, its
worker nodes' temp dirs included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrecipe.backends.host.images import serving_environment
from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.usefixtures("slurm_cluster")]
JOB = Path(__file__).resolve().parents[1] / "integration" / "assets" / "ray_job.py"


def _has_dashboard(bin_dir: Path) -> bool:
    """Whether the Ray of ``bin_dir``'s environment runs its dashboard, hence the Jobs API."""
    probe = subprocess.run([str(bin_dir / "python"), "-c", "import ray.dashboard.optional_deps, ray.job_submission"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("ray_env", ["the CLI's environment", "the Ray image's environment on PATH"])
def test_ray_data_job_spans_the_allocated_nodes(mlhome: Path, tmp_path: Path, ray_env: str) -> None:
    pytest.importorskip("ray.data", reason="Ray runs from the frameworks extra (pip install '.[frameworks]')")
    bin_dir, env = Path(sys.executable).parent, ""
    if ray_env != "the CLI's environment":  # the batch script runs the step in the recipe's PATH where it sets one
        vllm_env = serving_environment()
        if vllm_env is None or not _has_dashboard(vllm_env / "bin"):
            pytest.skip("no .venv-vllm with Ray's dashboard (make serve-env)")
        bin_dir = vllm_env / "bin"
        env = f'\n    - {{name: PATH, value: "{bin_dir}:{os.environ.get("PATH", "/usr/bin:/bin")}"}}'
    recipe = tmp_path / "ray.yaml"
    recipe.write_text(f"""\
image: rayproject/ray:2.60.0
resources:
  nnodes: 2
  requests: {{cpu: "1"}}
process:
  env:
    - {{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}{env}
  command: [python3, {JOB}, data, --out $HOME/report.json]
""")
    started = time.time()
    done = cli(mlhome, "install", "rd", "data-prep/ray-data-process", "-f", str(recipe), "-b", "slurm", timeout=400)
    log = cli(mlhome, "logs", "slurm://default/rd").stdout
    assert done.returncode == 0, done.stdout[-2000:] + log[-3000:]
    report = json.loads((mlhome / "volumes" / "pv-efs" / "home" / "rd" / "report.json").read_text())
    assert report["nodes"] == 3 and report["task_nodes"] == 2, report
    assert report["sum_of_squares"] == sum(i * i for i in range(1000))
    assert "2 x workers (1 CPU, 0 GPU each)" in log and "Ray cluster stopped" in log
    worker_dirs = [p.name for p in Path("/tmp/mlrecipe-ray").glob("*") if p.stat().st_mtime >= started]
    assert not worker_dirs, "each Ray worker node's temp dir goes when its node stops"
    if _has_dashboard(bin_dir):  # submitted as a Ray job, as under KubeRay
        assert report["submission_id"] == "rd-ray-data-process", report
        assert f"Ray job rd-ray-data-process SUCCEEDED (driver's job id {report['job_id']}" in log
    else:
        assert report["submission_id"] is None, report
        assert "the entrypoint runs as the Ray driver, not as a Ray job" in log
