"""``-B mode=local`` end to end through the CLI: the same plan runs on this machine through the local mode's client
(2 hosts, a file:// code channel), the model archive is recorded and reaches a later local step, ``logs --rank``
reads one host, and a re-run skips the unchanged training step but still hands its outputs on; a killed CLI's
running job is adopted by ``resume``, never started twice."""

from __future__ import annotations

import json
import signal
import subprocess
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient
from tests.integration.helpers import cli, start_cli

pytestmark = pytest.mark.integration

TRAIN = """
import json, os
host = os.environ["SM_CURRENT_HOST"]
print("host", host, "rank", os.environ["PET_NODE_RANK"], "master", os.environ["PET_MASTER_ADDR"], flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.json"), "w") as fh:
    json.dump({"host": host, "epochs": os.environ["EPOCHS"]}, fh)
"""
PIPELINE = """
release: smlocal
steps:
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {{nnodes: 2}}
      pvc: []
      sagemaker:
        inputs: [{{name: code, uri: "file://{code}"}}]
      train:
        env: [{{name: EPOCHS, value: "2"}}]
        command: [python3, /opt/ml/input/data/code/train.py]
  - name: use
    chart: data-prep/data-process
    values:
      pvc: []
      process:
        command: [echo, 'got $MLRECIPE_TRAIN_MODEL_ARTIFACTS']
"""


def test_local_mode_pipeline(tmp_path: Path, mlhome: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(code=code)))
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("sagemaker: {poll_seconds: 0.3}\n")
    result = cli(mlhome, "run", str(pipeline), "-B", "mode=local", timeout=240)
    # -B goes to the release's backend (local); the sagemaker section of the config file names the mode:
    assert result.returncode == 2 and "unknown option 'mode'" in result.stderr
    (mlhome / "config.yaml").write_text("sagemaker: {mode: local, poll_seconds: 0.3}\n")
    result = cli(mlhome, "run", str(pipeline), timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr

    status = json.loads(cli(mlhome, "status", "smlocal", "-o", "json").stdout)[0]
    train = {s["name"]: s for s in status["steps"]}["train"]
    artifacts = train["outputs"]["model_artifacts"]
    assert artifacts.startswith("file://") and artifacts.endswith("model.tar.gz")
    with tarfile.open(artifacts.removeprefix("file://")) as tar:
        weights = json.load(tar.extractfile("weights.json"))  # the first host's model directory
    assert weights == {"host": "algo-1", "epochs": "2"}
    assert f"got {artifacts}" in cli(mlhome, "logs", "smlocal", "use").stdout
    host2 = cli(mlhome, "logs", "smlocal", "train", "--rank", "1")
    assert host2.returncode == 0 and "host algo-2 rank 1 master algo-1" in host2.stdout

    pipeline.write_text(pipeline.read_text().replace("'got ", "'again "))  # a changed later step, same training
    again = cli(mlhome, "run", str(pipeline), timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "step train: skipped" in again.stdout and "step use: skipped" not in again.stdout
    assert f"again {artifacts}" in cli(mlhome, "logs", "smlocal", "use").stdout


SLEEPER = """
release: smresume
steps:
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      resources: {nnodes: 1}
      pvc: []
      train:
        command: [sleep, "5"]
"""


def _run_until_submitted(mlhome: Path, pipeline: Path) -> tuple[subprocess.Popen[str], Path]:
    """``mlrecipe run`` of ``pipeline`` in local mode, returned once its training job is submitted (with the state)."""
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("sagemaker: {mode: local, poll_seconds: 0.3}\n")
    driver = start_cli(mlhome, "run", str(pipeline))
    state = mlhome / "releases" / "local" / "default" / "smresume" / "state.json"
    deadline = time.monotonic() + 60
    while "job_name" not in (state.read_text() if state.exists() else ""):
        assert time.monotonic() < deadline and driver.poll() is None, "the job was not submitted"
        time.sleep(0.2)
    return driver, state


def test_lost_cli_then_resume_adopts_the_running_job(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(SLEEPER)
    driver, state = _run_until_submitted(mlhome, pipeline)
    driver.kill()  # a lost CLI: no chance to stop the job
    driver.wait()
    resumed = cli(mlhome, "resume", "smresume", timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "adopted: an earlier run of this plan created the job" in resumed.stdout
    jobs = [j for j in (mlhome / "sagemaker-local" / "training-jobs").iterdir() if j.is_dir()]
    assert [j.name for j in jobs] == [json.loads(state.read_text())["steps"]["train"]["outputs"]["job_name"]]


def test_ctrl_c_stops_the_job(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(SLEEPER.replace('"5"', '"300"'))
    driver, state = _run_until_submitted(mlhome, pipeline)
    driver.send_signal(signal.SIGINT)
    assert driver.wait(60) == 130
    job = json.loads(state.read_text())["steps"]["train"]["handle"]["job_name"]
    client = LocalSageMakerClient(mlhome / "sagemaker-local")
    deadline = time.monotonic() + 30
    while (status := client.describe_training_job(TrainingJobName=job)["TrainingJobStatus"]) == "Stopping":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert status == "Stopped"
