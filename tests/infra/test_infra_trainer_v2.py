"""infra/ installs Kubeflow Trainer v2 instead of the training operator: Terraform's ``training_api`` variable picks
one of the two kustomize paths (never both), Trainer's manifests are pinned at the release whose CRDs the charts'
TrainJobs are validated against (``../shared/crds/kubeflow-trainer-v2.3.0``), JobSet comes with them, and the
ClusterTrainingRuntimes are applied after the controller's webhook is available."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrecipe.helm.validate import crds_dir
from mlrecipe.infra.doctor.kubernetes import OPERATOR_INFO

hcl2 = pytest.importorskip("hcl2")

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _q(text: str) -> str:
    """python-hcl2 keeps the quotes of labels and string literals."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _parsed(kind: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((INFRA / "terraform").glob("*.tf")):
        with path.open() as fh:
            out += hcl2.load(fh).get(kind, [])
    return out


def _terraform_data() -> dict[str, Any]:
    """name -> body of the terraform_data resources."""
    return {_q(name): body for entry in _parsed("resource") for kind, by_name in entry.items()
            if _q(kind) == "terraform_data" for name, body in by_name.items()}


def test_training_api_variable_chooses_one_operator() -> None:
    variable = next(body for entry in _parsed("variable") for name, body in entry.items()
                    if _q(name) == "training_api")
    assert _q(variable["default"]) == "v1" and variable["validation"]
    data = _terraform_data()
    v1, v2 = str(data["training_operator"]["count"]), str(data["trainer_v2"]["count"])
    assert 'var.training_api != "v1"' in v1.replace('\\"', '"')
    assert 'var.training_api != "v2"' in v2.replace('\\"', '"')
    assert "var.kubeflow_platform_enabled" in v1 and "var.kubeflow_platform_enabled" in v2
    command = str(data["trainer_v2"]["provisioner"])
    steps = [command.index(s) for s in ("kustomize/trainer-v2\"", "wait --for=condition=Available",
                                        "kustomize/trainer-v2/runtimes")]
    assert steps == sorted(steps), "manager and JobSet, then the webhook, then the runtimes"
    assert "terraform_data.trainer_v2" in str(data["mpi_operator"]["depends_on"])


def test_trainer_manifests_are_pinned_at_the_validated_release() -> None:
    pinned = crds_dir() / "kubeflow-trainer-v2.3.0"
    assert (pinned / "trainer.kubeflow.org_trainjobs.yaml").is_file()
    version = pinned.name.rsplit("-", 1)[1]
    for path, overlay in (("trainer-v2", "manager"), ("trainer-v2/runtimes", "runtimes")):
        doc = yaml.safe_load((INFRA / "kustomize" / path / "kustomization.yaml").read_text())
        assert doc["resources"] == [
            f"https://github.com/kubeflow/trainer.git/manifests/overlays/{overlay}?ref={version}"]
    manager = (INFRA / "kustomize" / "trainer-v2" / "kustomization.yaml").read_text()
    assert "JobSet" in manager and "third-party" in manager


def test_doctor_hints_name_the_paths_that_exist() -> None:
    for key in ("training", "trainer"):
        for path in re.findall(r"-k (infra/kustomize/\S+)", OPERATOR_INFO[key].install):
            assert (INFRA.parent / path / "kustomization.yaml").is_file(), path
