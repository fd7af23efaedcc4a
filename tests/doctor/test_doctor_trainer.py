"""``doctor --backend kubernetes`` says which training APIs a cluster serves (PyTorchJob v1, Trainer v2's TrainJob) and
which one the config's ``training_api`` chose, and checks the operator of that one only.

The answers are the recorded EKS cluster of ``fixtures/kubernetes/`` (training operator installed); the Trainer v2
cluster is the same cluster with ``pytorchjobs.kubeflow.org`` replaced by Trainer v2.3.0's CRDs and JobSet's, in
the shape the API returns them. No API server runs here: the official client's HTTP round trip is replaced.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

from mlrecipe.infra.doctor import exit_code, run_checks
from mlrecipe.infra.doctor.kubernetes import checks
from mlrecipe.infra.doctor.requirements import requirements_of_recipe
from mlrecipe.infra.doctor.runner import run_doctor

NS = "kubeflow-user-example-com"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RECIPE = {"framework": "pytorch", "launcher": {"type": "torchrun", "script": "train.py"},
          "resources": {"nnodes": 2, "requests": {"cpu": 2}}}
TRAINER_CRDS = {"trainjobs.trainer.kubeflow.org": ("trainer.kubeflow.org", "TrainJob", "v1alpha1"),
                "clustertrainingruntimes.trainer.kubeflow.org":
                    ("trainer.kubeflow.org", "ClusterTrainingRuntime", "v1alpha1"),
                "trainingruntimes.trainer.kubeflow.org": ("trainer.kubeflow.org", "TrainingRuntime", "v1alpha1"),
                "jobsets.jobset.x-k8s.io": ("jobset.x-k8s.io", "JobSet", "v1alpha2")}
OPERATOR = "PyTorchJob CRD (Kubeflow training operator)"
TRAINER = "TrainJob CRD (Kubeflow Trainer v2)"


def _trainer_cluster(fake_kube: Any) -> None:
    """Swap the training operator's CRD for Trainer v2's and JobSet's."""
    listing = fake_kube.payloads[CRDS]
    template = next(i for i in listing["items"] if i["metadata"]["name"] == "pytorchjobs.kubeflow.org")
    items = [i for i in listing["items"] if i["metadata"]["name"] != "pytorchjobs.kubeflow.org"]
    for name, (group, kind, version) in TRAINER_CRDS.items():
        crd = copy.deepcopy(template)
        crd["metadata"]["name"] = name
        crd["spec"]["group"] = group
        crd["spec"]["names"].update(kind=kind, listKind=f"{kind}List", plural=name.split(".")[0],
                                    singular=kind.lower())
        crd["spec"]["versions"][0]["name"] = version
        items.append(crd)
    listing["items"] = items


def _run(option: str) -> dict[str, Any]:
    req = requirements_of_recipe(copy.deepcopy(RECIPE), "training/pytorchjob-distributed")
    req.source = Path("recipe.yaml")
    outcomes = run_checks(checks(req, context="ml-dev", namespace=NS, training_api=option))
    return {"by_name": {o.check.name: o for o in outcomes}, "code": exit_code(outcomes)}


def test_a_training_operator_cluster_stays_on_v1(fake_kube: Any) -> None:
    result = _run("auto")
    apis = result["by_name"]["training APIs"]
    assert apis.check.blocking and apis.result.ok
    assert apis.result.detail == "the cluster serves v1 (PyTorchJob); config training_api: auto -> v1 (PyTorchJob)"
    assert result["by_name"][OPERATOR].result.detail == "pytorchjobs.kubeflow.org v1"
    assert result["by_name"][TRAINER].result.detail.startswith("not used: config training_api auto -> v1")
    assert result["code"] == 0


def test_a_trainer_v2_cluster_runs_pytorchjob_recipes_as_trainjobs(fake_kube: Any) -> None:
    _trainer_cluster(fake_kube)
    result = _run("auto")
    assert result["by_name"]["training APIs"].result.detail.endswith("config training_api: auto -> v2 (TrainJob)")
    assert result["by_name"][OPERATOR].result.detail.startswith("not used")
    trainer = result["by_name"][TRAINER].result
    assert trainer.ok and "trainjobs.trainer.kubeflow.org v1alpha1" in trainer.detail
    assert "jobsets.jobset.x-k8s.io v1alpha2" in trainer.detail
    assert result["code"] == 0


def test_a_config_choosing_an_api_the_cluster_lacks_blocks_with_the_install(fake_kube: Any) -> None:
    _trainer_cluster(fake_kube)
    result = _run("v1")
    apis = result["by_name"]["training APIs"]
    assert not apis.result.ok and "serves v2 (TrainJob); config training_api: v1" in apis.result.detail
    assert "infra/kustomize/training-operator" in apis.result.fix_hint
    assert not result["by_name"][OPERATOR].result.ok
    assert result["code"] == 1


def test_doctor_reads_training_api_from_the_config_file(fake_kube: Any, mlrecipe_home: Path, tmp_path: Path) -> None:
    mlrecipe_home.mkdir(parents=True, exist_ok=True)
    (mlrecipe_home / "config.yaml").write_text("kubernetes:\n  training_api: v2\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("framework: pytorch\nresources:\n  nnodes: 2\n")
    out, err = io.StringIO(), io.StringIO()
    code = run_doctor("kubernetes", recipe, context="ml-dev", namespace=NS, stream=out, err=err)
    assert "config training_api: v2 -> v2 (TrainJob)" in out.getvalue()
    assert "infra/kustomize/trainer-v2" in out.getvalue()
    assert code == 1, err.getvalue()
