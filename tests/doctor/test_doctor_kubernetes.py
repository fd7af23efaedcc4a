"""Kubernetes doctor checks against API responses served from fixtures/kubernetes/.

No Kubernetes API server can run on these machines, so the answers are JSON files in the exact shape
the API returns for an EKS cluster built by infra/terraform (two system nodes, two p4de.24xlarge
Karpenter nodes, the operators' CRDs, device plugins, the ml-platform storage classes and claims).
They are written, not captured from a live cluster. The official client runs unchanged: only the HTTP
round trip (RESTClientObject.request) is replaced, so its URL building and deserialization are
exercised."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlrecipe.infra.doctor import exit_code, run_checks
from mlrecipe.infra.doctor.kubernetes import _pool_admits, checks
from mlrecipe.infra.doctor.requirements import Requirements, requirements_of_recipe

NS = "kubeflow-user-example-com"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
NODES = "/api/v1/nodes"
DAEMONSETS = "/apis/apps/v1/daemonsets"


def recipe(**values: Any) -> Requirements:
    from pathlib import Path

    req = requirements_of_recipe(values, values.pop("chart", None) if "chart" in values else None)
    req.source = Path("recipe.yaml")
    return req


def run(req: Requirements, context: str | None = "ml-dev") -> dict[str, Any]:
    outcomes = run_checks(checks(req, context=context, namespace=NS))
    return {"by_name": {o.check.name: o for o in outcomes}, "code": exit_code(outcomes), "outcomes": outcomes}


P4DE_RECIPE = {
    "framework": "pytorch",
    "launcher": {"type": "torchrun", "script": "train.py"},
    "resources": {
        "node_type": "p4de.24xlarge",
        "nnodes": 2,
        "requests": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4},
        "limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4},
    },
}


def test_healthy_cluster_passes_the_platform_preflight(fake_kube: Any) -> None:
    result = run(Requirements())
    by_name = result["by_name"]
    assert result["code"] == 0, [(o.check.name, o.result.detail) for o in result["outcomes"] if o.status != "ok"]
    assert "v1.33.5-eks" in by_name["context reachable"].result.detail
    assert "mpijobs.kubeflow.org v2beta1" in by_name["MPIJob v2beta1 CRD (MPI operator)"].result.detail
    assert "2/2 ready" in by_name["NVIDIA device plugin"].result.detail
    assert "no matching node yet" in by_name["Neuron device plugin"].result.detail
    assert "nvidia.com/gpu: 16 on 2 node(s) [p4de.24xlarge]" in by_name["accelerators"].result.detail
    assert (
        "pv-efs Bound to kubeflow-user-example-com-pv-efs (efs-sc, 1000Gi)"
        in by_name["claim pv-efs bound"].result.detail
    )
    assert all(method == "GET" for method, _ in fake_kube.requests), "doctor must only read"


def test_recipe_on_p4de_nodes_with_efa(fake_kube: Any) -> None:
    result = run(recipe(**copy.deepcopy(P4DE_RECIPE)))
    by_name = result["by_name"]
    assert result["code"] == 0
    assert by_name["allocatable nvidia.com/gpu"].result.detail.startswith("2 node(s) offer 8 nvidia.com/gpu per node")
    assert by_name["allocatable vpc.amazonaws.com/efa"].result.ok
    assert by_name["PyTorchJob CRD (Kubeflow training operator)"].check.blocking
    assert not by_name["Ray CRDs (KubeRay operator)"].check.blocking
    assert by_name["NVIDIA device plugin"].check.blocking and by_name["EFA device plugin"].check.blocking


def test_more_nodes_than_exist_pass_when_a_nodepool_can_launch_them(fake_kube: Any) -> None:
    values = copy.deepcopy(P4DE_RECIPE)
    values["resources"]["nnodes"] = 4
    result = run(recipe(**values))
    detail = result["by_name"]["allocatable nvidia.com/gpu"].result.detail
    assert result["code"] == 0
    assert "NodePool(s) cuda, cuda-efa can launch 4" in detail


def test_missing_accelerators_without_a_nodepool_block(fake_kube: Any) -> None:
    values = copy.deepcopy(P4DE_RECIPE)
    values["resources"]["node_type"] = "p6-b200.48xlarge"
    result = run(recipe(**values))
    outcome = result["by_name"]["allocatable nvidia.com/gpu"]
    assert result["code"] == 1
    assert outcome.status == "FAIL"
    assert "0 node(s) offer 8 nvidia.com/gpu per node on p6-b200.48xlarge" in outcome.result.detail
    assert "NodePool" in outcome.result.fix_hint


def test_neuron_recipe_relies_on_the_neuron_pool(fake_kube: Any) -> None:
    req = recipe(resources={"node_type": "trn1.32xlarge", "requests": {"aws.amazon.com/neuron": 16}})
    result = run(req)
    assert result["by_name"]["allocatable aws.amazon.com/neuron"].result.ok
    assert "neuron" in result["by_name"]["allocatable aws.amazon.com/neuron"].result.detail
    assert result["by_name"]["Neuron device plugin"].check.blocking


def test_missing_operator_crd_and_training_operator_mpijob(fake_kube: Any) -> None:
    crds = fake_kube.payloads[CRDS]
    crds["items"] = [c for c in crds["items"] if c["metadata"]["name"] != "rayjobs.ray.io"]
    for c in crds["items"]:
        if c["metadata"]["name"] == "mpijobs.kubeflow.org":
            c["spec"]["versions"][0]["name"] = "v1"  # the training operator's own MPIJob CRD
    result = run(Requirements())
    ray = result["by_name"]["Ray CRDs (KubeRay operator)"]
    mpi = result["by_name"]["MPIJob v2beta1 CRD (MPI operator)"]
    assert result["code"] == 1
    assert ray.status == "FAIL" and "rayjobs.ray.io missing" in ray.result.detail
    assert "kuberay-operator" in ray.result.fix_hint
    assert "serves v1, not v2beta1" in mpi.result.detail
    assert "kubectl delete crd mpijobs.kubeflow.org" in mpi.result.fix_hint
    # A recipe that only needs PyTorchJob is not blocked by the missing Ray CRD.
    only_torch = run(recipe(launcher={"type": "torchrun", "script": "t.py"}))
    assert only_torch["by_name"]["Ray CRDs (KubeRay operator)"].status == "warn"
    assert only_torch["code"] == 0


def test_pending_claim_and_missing_claim_block(fake_kube: Any) -> None:
    pvcs = fake_kube.payloads[PVCS]
    pvcs["items"][0]["status"] = {"phase": "Pending"}
    pvcs["items"] = pvcs["items"][:1]
    result = run(Requirements())
    efs = result["by_name"]["claim pv-efs bound"]
    fsx = result["by_name"]["claim pv-fsx bound"]
    assert result["code"] == 1
    assert efs.status == "FAIL" and "is Pending" in efs.result.detail and "describe pvc pv-efs" in efs.result.fix_hint
    assert fsx.status == "FAIL" and "does not exist" in fsx.result.detail


def test_recipe_claims_replace_the_defaults(fake_kube: Any) -> None:
    result = run(recipe(pvc=[{"name": "pv-efs", "mount_path": "/efs"}]))
    names = [n for n in result["by_name"] if n.startswith("claim ")]
    assert names == ["claim pv-efs bound"]


def test_unready_device_plugin(fake_kube: Any) -> None:
    for ds in fake_kube.payloads[DAEMONSETS]["items"]:
        if ds["metadata"]["name"] == "nvidia-device-plugin":
            ds["status"]["numberReady"] = 1
    result = run(recipe(**copy.deepcopy(P4DE_RECIPE)))
    outcome = result["by_name"]["NVIDIA device plugin"]
    assert outcome.status == "FAIL" and "1/2 ready" in outcome.result.detail
    assert result["code"] == 1


def test_missing_namespace(fake_kube: Any) -> None:
    del fake_kube.payloads[f"/api/v1/namespaces/{NS}"]
    result = run(Requirements())
    outcome = result["by_name"][f"namespace {NS}"]
    assert outcome.status == "FAIL" and f"kubectl create namespace {NS}" in outcome.result.fix_hint


def test_rejected_credentials_skip_the_rest(fake_kube: Any) -> None:
    fake_kube.fail_with = 401
    result = run(Requirements())
    reach = result["by_name"]["context reachable"]
    assert reach.status == "FAIL" and "refused the credentials" in reach.result.detail
    assert result["by_name"]["claim pv-efs bound"].status == "skip"
    assert result["code"] == 1


def test_unknown_context_fails_with_the_kubeconfig_hint(fake_kube: Any) -> None:
    result = run(Requirements(), context="no-such-context")
    reach = result["by_name"]["context reachable"]
    assert reach.status == "FAIL"
    assert "update-kubeconfig" in reach.result.fix_hint
    assert not fake_kube.requests


def test_ebs_recipe_needs_a_default_storage_class(fake_kube: Any) -> None:
    for sc in fake_kube.payloads["/apis/storage.k8s.io/v1/storageclasses"]["items"]:
        sc["metadata"].get("annotations", {}).pop("storageclass.kubernetes.io/is-default-class", None)
    result = run(recipe(ebs={"storage": "200Gi", "mount_path": "/tmp"}))
    outcome = result["by_name"]["storage classes"]
    assert outcome.status == "FAIL" and "no default StorageClass" in outcome.result.detail


@pytest.mark.parametrize(
    ("instance_type", "resource", "pool", "expected"),
    [
        ("p5.48xlarge", "nvidia.com/gpu", "cuda-efa", True),
        ("g5.xlarge", "nvidia.com/gpu", "cuda-efa", False),
        ("g5.xlarge", "nvidia.com/gpu", "cuda", True),
        ("trn1.32xlarge", "aws.amazon.com/neuron", "neuron", True),
        (None, "nvidia.com/gpu", "cpu", False),
        (None, "vpc.amazonaws.com/efa", "cuda-efa", True),
    ],
)
def test_pool_admission(fake_kube: Any, instance_type: str | None, resource: str, pool: str, expected: bool) -> None:
    pools = {p["metadata"]["name"]: p for p in fake_kube.payloads["/apis/karpenter.sh/v1/nodepools"]["items"]}
    assert _pool_admits(pools[pool], instance_type, resource) is expected


def test_cpu_node_type_is_launched_by_the_cpu_pool(fake_kube: Any) -> None:
    result = run(recipe(resources={"node_type": "c7i.24xlarge", "nnodes": 2}))
    outcome = result["by_name"]["node type c7i.24xlarge"]
    assert outcome.result.ok and "NodePool(s) cpu" in outcome.result.detail
    missing = run(recipe(resources={"node_type": "x2iedn.32xlarge"}))
    assert missing["by_name"]["node type x2iedn.32xlarge"].status == "FAIL"
