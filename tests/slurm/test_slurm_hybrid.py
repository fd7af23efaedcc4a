"""A hybrid pipeline on the real Slurm test cluster: data prepared on the local backend, training as a Slurm job,
one release. Status shows each step's backend, running again (and resume) skips both, uninstall finds both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.serve.serving import write
from tests.slurm.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]

PIPELINE = """
    release: hybrid
    steps:
      - name: data
        chart: data-prep/data-process
        values:
          pvc: []
          process: {command: [python3, $MLRECIPE_PIPELINE_DIR/data.py]}
      - name: train
        chart: data-prep/data-process
        backend: slurm
        values:
          pvc: []
          process: {command: [python3, $MLRECIPE_PIPELINE_DIR/train.py]}
    """
DATA = """
    import os
    with open(os.environ["MLRECIPE_PIPELINE_DIR"] + "/data.txt", "w") as fh:
        fh.write("3 4")
    """
TRAIN = """
    import os
    here = os.environ["MLRECIPE_PIPELINE_DIR"]
    a, b = open(here + "/data.txt").read().split()
    with open(here + "/model.txt", "w") as fh:
        fh.write(f"{os.environ['SLURM_JOB_ID']} {os.environ['MLRECIPE_BACKEND']} {int(a) * int(b)}")
    """


def test_local_data_step_then_slurm_training_step(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster) -> None:
    pipeline = write(tmp_path / "pipeline.yaml", PIPELINE)
    write(tmp_path / "data.py", DATA)
    write(tmp_path / "train.py", TRAIN)
    dry = cli(mlhome, "run", str(pipeline), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "# ==== step data: backend local ====" in dry.stdout
    assert "# ==== step train: backend slurm ====" in dry.stdout and "#SBATCH --job-name=hybrid-train" in dry.stdout

    result = cli(mlhome, "run", str(pipeline), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "step train (data-prep/data-process on slurm)" in result.stdout
    job_id, backend, product = (tmp_path / "model.txt").read_text().split()
    assert (backend, product) == ("slurm", "12"), "the Slurm job read what the local step wrote"

    status = json.loads(cli(mlhome, "status", "hybrid", "-o", "json").stdout)[0]
    assert status["address"] == "local://default/hybrid" and status["state"] == "succeeded"
    steps = {s["name"]: s for s in status["steps"]}
    assert {n: (s["backend"], s["state"]) for n, s in steps.items()} == {
        "data": ("local", "succeeded"), "train": ("slurm", "succeeded")}
    assert steps["train"]["needs"] == ["data"]
    record = json.loads((mlhome / "releases" / "local" / "default" / "hybrid" / "state.json").read_text())
    assert record["steps"]["train"]["handle"]["job_id"] == job_id
    state = slurm_cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    assert "JobState=COMPLETED" in state
    text = cli(mlhome, "status", "hybrid").stdout
    assert "slurm" in text.split("train", 1)[1].splitlines()[0] and "needs data" in text
    logs = cli(mlhome, "logs", "hybrid", "train")
    assert logs.returncode == 0, logs.stderr

    again = cli(mlhome, "run", str(pipeline), timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "step data: skipped" in again.stdout and "step train: skipped" in again.stdout
    assert (tmp_path / "model.txt").read_text().split()[0] == job_id, "no new job"
    resumed = cli(mlhome, "resume", "hybrid", timeout=120)
    assert resumed.returncode == 0 and "already succeeded" in resumed.stdout

    # A failed training job: resume re-runs only it, on Slurm, and skips the data step.
    (tmp_path / "data.txt").write_text("x 4")
    forced = cli(mlhome, "run", str(pipeline), "--set", "train.backoff_limit=0", timeout=120)
    assert forced.returncode == 1 and "step data: skipped" in forced.stdout, forced.stdout + forced.stderr
    (tmp_path / "data.txt").write_text("5 4")
    resumed = cli(mlhome, "resume", "hybrid", timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step data: skipped" in resumed.stdout and "step train (data-prep/data-process on slurm)" in resumed.stdout
    assert (tmp_path / "model.txt").read_text().split()[1:] == ["slurm", "20"]
    assert cli(mlhome, "uninstall", "hybrid").returncode == 0
    assert not (mlhome / "releases" / "local" / "default" / "hybrid").exists()
