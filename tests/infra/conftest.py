"""Shared paths and validators for the infra tests (Terraform, ml-platform chart, eksctl)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"
CRDS = SHARED / "crds"
SCHEMAS = SHARED / "schemas"
INFRA = REPO / "infra"
TERRAFORM = INFRA / "terraform"
CHART = INFRA / "charts" / "ml-platform"
EKSCTL_DIR = INFRA / "eksctl"
KUBE_VERSION = "1.33"

CRD_FILES = {
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_nodepools.yaml",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_ec2nodeclasses.yaml",
}


def strictify(schema: Any) -> Any:
    """Return a copy of an openAPIV3Schema where every object with declared properties rejects
    unknown fields (additionalProperties: false), unless the CRD preserves unknown fields there."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return schema


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """A jsonschema validator built from the served CRD version in ../shared/crds/."""
    filename = CRD_FILES[(api_version, kind)]
    crd = yaml.safe_load((CRDS / filename).read_text())
    version = api_version.split("/")[1]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    schema = strictify(served["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def validate_object(obj: dict[str, Any]) -> None:
    """Validate one Kubernetes object: custom resources against the CRD schema (strict), core kinds
    with kubernetes-validate in strict mode for Kubernetes 1.33. Raises on the first problem."""
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_FILES:
        errors = sorted(crd_validator(*key).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            lines = [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}:\n" + "\n".join(lines))
        return
    import kubernetes_validate

    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def parse_manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """All non-empty YAML documents of a rendered chart, in template order."""
    docs: list[dict[str, Any]] = []
    for name in sorted(rendered):
        for doc in yaml.safe_load_all(rendered[name]):
            if doc:
                docs.append(doc)
    return docs


@pytest.fixture(scope="session")
def eksctl_schema() -> dict[str, Any]:
    """eksctl's ClusterConfig JSON schema (eksctl.io/v1alpha5)."""
    return json.loads((SCHEMAS / "eksctl-clusterconfig-v1alpha5.schema.json").read_text())


@pytest.fixture(scope="session")
def validate_clusterconfig(eksctl_schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Validate a ClusterConfig dict against the eksctl schema, reporting every error."""
    validator = jsonschema.Draft7Validator(eksctl_schema)

    def check(config: dict[str, Any]) -> None:
        errors = sorted(validator.iter_errors(config), key=lambda e: list(e.path))
        if errors:
            raise AssertionError("\n".join(f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors))

    return check


@pytest.fixture(scope="session")
def infra_paths() -> SimpleNamespace:
    """Paths of the repository's infra/ tree and of the shared data beside the clone."""
    return SimpleNamespace(
        repo=REPO,
        shared=SHARED,
        crds=CRDS,
        schemas=SCHEMAS,
        infra=INFRA,
        terraform=TERRAFORM,
        chart=CHART,
        eksctl=EKSCTL_DIR,
    )


@pytest.fixture(scope="session")
def validate_k8s_object() -> Callable[[dict[str, Any]], None]:
    """See validate_object."""
    return validate_object


@pytest.fixture(scope="session")
def parse_rendered() -> Callable[[dict[str, str]], list[dict[str, Any]]]:
    """See parse_manifests."""
    return parse_manifests
