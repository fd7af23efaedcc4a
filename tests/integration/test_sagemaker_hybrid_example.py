"""examples/sagemaker-hybrid end to end in SageMaker's local mode (``-B sagemaker.mode=local``): data on the local
backend into /fsx, DDP training on 2 SageMaker-local hosts reading it through the pvc mount, the endpoint serving
the model archive, a client step sending 100 held-out images; ``uninstall`` leaves no endpoint server. Plus the
dry runs: the mode aws requests (golden) and the training step moved to the local or Kubernetes backend."""

from __future__ import annotations

import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.golden import check_golden, normalize
from tests.integration.helpers import cli
from tests.repo import EXAMPLES, REPO

pytestmark = pytest.mark.integration

EXAMPLE = EXAMPLES / "sagemaker-hybrid"
PIPELINE = EXAMPLE / "pipeline.yaml"
GOLDEN = REPO / "tests" / "golden" / "sagemaker" / "hybrid-example-aws.yaml"
AWS = [arg for opt in (
    "role_arn=arn:aws:iam::123456789012:role/SageMakerExec", "s3_prefix=s3://my-bucket/mlrecipe", "region=us-west-2",
    "file_systems.pv-fsx.id=fs-0123456789abcdef0", "file_systems.pv-fsx.directory_path=/fsx",
    "subnets[0]=subnet-0abc1234", "security_groups[0]=sg-0abc1234") for arg in ("-B", f"sagemaker.{opt}")]


def _sagemaker_sections(text: str) -> str:
    """The SageMaker steps' part of a hybrid dry run (the local steps' plans hold free ports)."""
    parts = text.split("# ==== step ")
    return "".join("# ==== step " + p for p in parts if p.split(":", 1)[0] in ("train", "endpoint"))


@pytest.mark.slow
def test_example_runs_in_local_mode(mlhome: Path) -> None:
    run = cli(mlhome, "run", str(PIPELINE), "-B", "sagemaker.mode=local", "-B", "sagemaker.poll_seconds=1",
              timeout=480)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    status = json.loads(cli(mlhome, "status", "sagemaker-hybrid", "-o", "json").stdout)[0]
    steps = {s["name"]: s for s in status["steps"]}
    assert [steps[n]["state"] for n in ("data", "train", "endpoint", "client")] == [
        "succeeded", "succeeded", "serving", "succeeded"]
    assert [steps[n]["backend"] for n in ("data", "train", "endpoint", "client")] == [
        "local", "sagemaker", "sagemaker", "local"]

    train_log = cli(mlhome, "logs", "sagemaker-hybrid", "train").stdout
    accuracy = float(train_log.split("final held-out accuracy ")[1].split()[0])
    assert accuracy >= 0.90, train_log[-2000:]
    assert "weights identical on all 2 ranks: True" in train_log
    archive = steps["train"]["outputs"]["model_artifacts"].removeprefix("file://")
    with tarfile.open(archive) as tar:
        digests = json.load(tar.extractfile("weights.sha256.json"))  # type: ignore[arg-type]
        assert "code/inference.py" in tar.getnames()
    assert len(digests) == 2 and len(set(digests)) == 1  # both hosts ended with the same weights

    client_log = cli(mlhome, "logs", "sagemaker-hybrid", "client").stdout
    right = int(client_log.split("endpoint accuracy ")[1].split("(")[1].split("/")[0])
    assert right >= 90, client_log

    url = steps["endpoint"]["url"]
    assert steps["endpoint"]["outputs"]["endpoint_name"].startswith("sagemaker-hybrid-endpoint-")
    with urllib.request.urlopen(f"{url}/ping", timeout=10) as answer:
        assert answer.status == 200
    assert cli(mlhome, "uninstall", "sagemaker-hybrid").returncode == 0
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/ping", timeout=5)
    local = mlhome / "sagemaker-local"
    for kind in ("endpoints", "endpoint-configs", "models"):  # only the stores' lock files are left
        assert [p.name for p in (local / kind).iterdir() if not p.name.startswith(".")] == [], kind


def test_aws_mode_dry_run_golden(mlhome: Path, update_golden: bool) -> None:
    dry = cli(mlhome, "run", str(PIPELINE), "--dry-run", *AWS, timeout=120)
    assert dry.returncode == 0, dry.stderr
    text = normalize(_sagemaker_sections(dry.stdout), [(str(mlhome), "$MLRECIPE_HOME"), (str(REPO), "$REPO")])
    assert "FileSystemId: fs-0123456789abcdef0" in text and "InstanceCount: 2" in text
    assert "ModelDataUrl: $MLRECIPE_TRAIN_MODEL_ARTIFACTS" in text
    check_golden(GOLDEN, text, update_golden)


def test_training_moves_to_the_local_or_kubernetes_backend(mlhome: Path) -> None:
    local = cli(mlhome, "run", str(PIPELINE), "--dry-run", "-B", "sagemaker.mode=local", "--set", "train.backend=local",
                timeout=120)
    assert local.returncode == 0, local.stderr
    assert "# ==== step train: backend local ====" in local.stdout and "torchrun" in local.stdout
    kube = cli(mlhome, "run", str(PIPELINE), "--dry-run", "-B", "sagemaker.mode=local", "--set",
               "train.backend=kubernetes", timeout=120)
    assert kube.returncode == 0, kube.stderr
    assert "# ==== step train: backend kubernetes ====" in kube.stdout and "kind: PyTorchJob" in kube.stdout
    release = cli(mlhome, "run", str(PIPELINE), "--dry-run", "-b", "kubernetes", "-B", "sagemaker.mode=local",
                  "--set", "train.backend=null", timeout=120)  # null: the release's backend
    assert release.returncode == 0, release.stderr
    assert "# ==== step train: backend kubernetes ====" in release.stdout
    assert "# ==== step endpoint: backend sagemaker ====" in release.stdout
