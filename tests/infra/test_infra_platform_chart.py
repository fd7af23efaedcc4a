"""The ml-platform chart (infra/charts/ml-platform) renders, with the real Helm engine, objects that
validate against the Karpenter CRDs in ../shared/crds/ (strict: unknown fields are errors) and the
Kubernetes 1.33 schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from mlrecipe.spec.values import deep_merge

helm_python = pytest.importorskip("helm_python")

Docs = list[dict[str, Any]]

BASE_VALUES: dict[str, Any] = {
    "clusterName": "ml-dev",
    "karpenter": {"nodeRole": "KarpenterNodeRole-ml-dev"},
    "storage": {
        "efs": {"fileSystemId": "fs-0123456789abcdef0"},
        "fsx": {
            "fileSystemId": "fs-0fedcba9876543210",
            "dnsName": "fs-0fedcba9876543210.fsx.eu-west-1.amazonaws.com",
            "mountName": "x7ab2cdf",
        },
    },
}


@pytest.fixture(scope="module")
def render(infra_paths: SimpleNamespace, parse_rendered: Callable) -> Callable[[dict[str, Any]], Docs]:
    """Render the chart with the real Helm engine and parse every document."""

    def _render(values: dict[str, Any]) -> Docs:
        with helm_python.Chart.load(str(infra_paths.chart)) as chart:
            return parse_rendered(chart.render(values, name="ml-platform", namespace="kube-system"))

    return _render


def by_kind(docs: Docs, kind: str) -> dict[str, dict[str, Any]]:
    """Objects of one kind, by name."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def check_cel_rules(docs: Docs) -> None:
    """The CRDs' x-kubernetes-validations (CEL) that jsonschema cannot run, written out for the
    fields this chart sets."""
    classes = by_kind(docs, "EC2NodeClass")
    for name, nc in classes.items():
        spec = nc["spec"]
        assert ("role" in spec) != ("instanceProfile" in spec), f"{name}: exactly one of role/instanceProfile"
        terms = spec["amiSelectorTerms"]
        if any("alias" in t for t in terms):
            assert len(terms) == 1 and set(terms[0]) == {"alias"}, f"{name}: alias is exclusive"
            family = terms[0]["alias"].split("@")[0]
            assert family in {"al2", "al2023", "bottlerocket"}
        for term in spec.get("capacityReservationSelectorTerms", []):
            assert set(term) == {"id"} or "id" not in term
        roots = [b for b in spec.get("blockDeviceMappings", []) if b.get("rootVolume")]
        assert len(roots) <= 1
        for tag in spec.get("tags", {}):
            assert not tag.startswith("kubernetes.io/cluster") and tag != "karpenter.sh/nodepool"
    for name, pool in by_kind(docs, "NodePool").items():
        tspec = pool["spec"]["template"]["spec"]
        assert tspec["nodeClassRef"]["name"] in classes, f"{name}: nodeClassRef points to a rendered class"
        for req in tspec["requirements"]:
            if req["operator"] == "In":
                assert req["values"], f"{name}: 'In' needs values"
            if req["operator"] in {"Gt", "Lt", "Gte", "Lte"}:
                assert len(req["values"]) == 1 and int(req["values"][0]) >= 0
            domain = req["key"].split("/")[0]
            assert not domain.endswith("karpenter.sh") or req["key"] == "karpenter.sh/capacity-type"
        for label in pool["spec"]["template"].get("metadata", {}).get("labels", {}):
            assert not label.split("/")[0].endswith("karpenter.sh")


def test_default_render_validates_against_crds_and_core_schemas(
    render: Callable, validate_k8s_object: Callable
) -> None:
    docs = render(BASE_VALUES)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "EC2NodeClass",
        "Namespace",
        "NodePool",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "StorageClass",
    ]
    for doc in docs:
        validate_k8s_object(doc)
    check_cel_rules(docs)
    assert set(by_kind(docs, "NodePool")) == {"cuda", "cuda-efa", "neuron", "cpu"}
    assert set(by_kind(docs, "EC2NodeClass")) == {"cuda", "cuda-efa", "neuron", "cpu"}


def test_efa_and_neuron_classes_use_their_single_az_subnets(render: Callable) -> None:
    classes = by_kind(render(BASE_VALUES), "EC2NodeClass")
    assert classes["cuda-efa"]["spec"]["subnetSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery/cuda-efa": "ml-dev"}}
    ]
    assert classes["neuron"]["spec"]["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery/neuron": "ml-dev"}}]
    assert classes["cuda"]["spec"]["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "ml-dev"}}]


def test_claims_are_bound_to_static_volumes_in_the_ml_namespace(
    render: Callable, validate_k8s_object: Callable
) -> None:
    docs = render(deep_merge(BASE_VALUES, {"mlNamespace": {"name": "team-a", "create": False}}))
    assert "Namespace" not in {d["kind"] for d in docs}
    claims = by_kind(docs, "PersistentVolumeClaim")
    volumes = by_kind(docs, "PersistentVolume")
    assert set(claims) == {"pv-efs", "pv-fsx"}
    for name, claim in claims.items():
        assert claim["metadata"]["namespace"] == "team-a"
        pv = volumes[claim["spec"]["volumeName"]]
        assert pv["spec"]["claimRef"] == {"namespace": "team-a", "name": name}
        assert pv["spec"]["storageClassName"] == claim["spec"]["storageClassName"]
    assert volumes["team-a-pv-efs"]["spec"]["csi"] == {
        "driver": "efs.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
    }
    fsx = volumes["team-a-pv-fsx"]["spec"]["csi"]
    assert fsx["driver"] == "fsx.csi.aws.com"
    assert fsx["volumeAttributes"]["mountname"] == "x7ab2cdf"
    for doc in docs:
        validate_k8s_object(doc)


@pytest.mark.parametrize("capacity_block", [False, True], ids=["odcr", "capacity-block"])
def test_efa_pool_targets_a_capacity_reservation(
    capacity_block: bool, render: Callable, validate_k8s_object: Callable
) -> None:
    values = deep_merge(
        BASE_VALUES,
        {
            "karpenter": {
                "nodePools": {
                    "cudaEfa": {
                        "capacityReservation": {
                            "ids": ["cr-0a1b2c3d4e5f60718"],
                            "capacityBlock": capacity_block,
                        }
                    }
                }
            }
        },
    )
    docs = render(values)
    for doc in docs:
        validate_k8s_object(doc)
    check_cel_rules(docs)
    nc = by_kind(docs, "EC2NodeClass")["cuda-efa"]
    assert nc["spec"]["capacityReservationSelectorTerms"] == [{"id": "cr-0a1b2c3d4e5f60718"}]
    reqs = {
        r["key"]: r["values"] for r in by_kind(docs, "NodePool")["cuda-efa"]["spec"]["template"]["spec"]["requirements"]
    }
    assert reqs["karpenter.sh/capacity-type"] == ["reserved"]
    if capacity_block:
        assert reqs["karpenter.k8s.aws/capacity-reservation-type"] == ["capacity-block"]
    else:
        assert "karpenter.k8s.aws/capacity-reservation-type" not in reqs
    # The other pools are untouched by the reservation.
    assert "capacityReservationSelectorTerms" not in by_kind(docs, "EC2NodeClass")["cuda"]["spec"]


def test_pools_can_be_disabled_one_by_one(render: Callable) -> None:
    off = {"neuron": {"enabled": False}, "cpu": {"enabled": False}}
    values = deep_merge(BASE_VALUES, {"karpenter": {"nodePools": off}})
    docs = render(values)
    assert set(by_kind(docs, "NodePool")) == {"cuda", "cuda-efa"}
    only_storage = render(deep_merge(BASE_VALUES, {"karpenter": {"enabled": False}}))
    assert not by_kind(only_storage, "NodePool")


def test_missing_required_values_fail_with_a_message(render: Callable) -> None:
    values = copy.deepcopy(BASE_VALUES)
    values["karpenter"]["nodeRole"] = ""
    with pytest.raises(helm_python.HelmError, match=r"karpenter\.nodeRole is required"):
        render(values)
    values = copy.deepcopy(BASE_VALUES)
    values["storage"]["fsx"]["mountName"] = ""
    with pytest.raises(helm_python.HelmError, match=r"storage\.fsx\.mountName is required"):
        render(values)


def test_values_schema_rejects_typos_and_bad_ids(render: Callable) -> None:
    with pytest.raises(helm_python.HelmError, match="nodePool"):
        render(deep_merge(BASE_VALUES, {"karpenter": {"nodePool": {}}}))
    with pytest.raises(helm_python.HelmError):
        render(
            deep_merge(
                BASE_VALUES,
                {"karpenter": {"nodePools": {"cudaEfa": {"capacityReservation": {"ids": ["odcr-123"]}}}}},
            )
        )


def test_strict_crd_validation_catches_a_misspelled_field(
    render: Callable, validate_k8s_object: Callable, infra_paths: SimpleNamespace
) -> None:
    """Guards the validator itself: a typo the CRD would prune must fail here."""
    pool = copy.deepcopy(by_kind(render(BASE_VALUES), "NodePool")["cuda"])
    pool["spec"]["template"]["spec"]["requirments"] = pool["spec"]["template"]["spec"].pop("requirements")
    with pytest.raises(AssertionError, match="requirments"):
        validate_k8s_object(pool)
    assert (infra_paths.crds / "karpenter.sh_nodepools.yaml").exists()
