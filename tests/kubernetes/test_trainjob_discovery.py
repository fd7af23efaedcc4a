"""``training_api: auto`` asks the API discovery (``GET /apis/<group>/<version>``) through the official client: the
client builds the requests and reads the answers as usual; only the HTTP round trip answers from payloads in the
API server's shape (an APIResourceList; a 404 Status for a group the cluster does not serve)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlrecipe.backends.kubernetes import training_api
from mlrecipe.backends.kubernetes.cluster import KubeClient

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: "https://ABCDEF0123456789.gr7.eks.amazonaws.com", insecure-skip-tls-verify: true}}
contexts:
- {name: c, context: {cluster: c, user: u}}
current-context: c
users:
- {name: u, user: {token: k8s-aws-v1.recorded-test-token}}
"""
TRAINER = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "trainer.kubeflow.org/v1alpha1",
           "resources": [{"name": "trainjobs", "singularName": "trainjob", "namespaced": True, "kind": "TrainJob",
                          "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"]},
                         {"name": "trainjobs/status", "singularName": "", "namespaced": True, "kind": "TrainJob",
                          "verbs": ["get", "patch", "update"]},
                         {"name": "clustertrainingruntimes", "singularName": "clustertrainingruntime",
                          "namespaced": False, "kind": "ClusterTrainingRuntime", "verbs": ["get", "list"]}]}
MPI_ONLY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kubeflow.org/v1", "resources": []}


def _client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payloads: dict[str, Any]) -> tuple[KubeClient, list]:
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.client.rest import RESTResponse

    asked: list[tuple[str, str]] = []

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        path = url.split("://", 1)[1].split("/", 1)[1].split("?")[0]
        asked.append((method, "/" + path))
        payload = payloads.get("/" + path)
        status = 200 if payload is not None else 404
        body = payload if payload is not None else {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                    "reason": "NotFound", "code": 404, "message": "404 page not found"}
        raw = RESTResponse(SimpleNamespace(status=status, reason="OK" if status == 200 else "Not Found",
                                           data=json.dumps(body).encode(),
                                           headers={"Content-Type": "application/json"}))
        return raw  # the client itself turns a 404 into an ApiException

    monkeypatch.setattr(kubernetes.client.rest.RESTClientObject, "request", request)
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    return KubeClient(str(config), "c"), asked


def test_a_trainer_v2_cluster_is_discovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client, asked = _client(tmp_path, monkeypatch, {"/apis/trainer.kubeflow.org/v1alpha1": TRAINER})
    assert client.served_crds(training_api.CRD_VERSION) == {training_api.TRAINJOB_CRD}
    assert asked == [("GET", "/apis/kubeflow.org/v1"), ("GET", "/apis/trainer.kubeflow.org/v1alpha1")]
    assert training_api.choose("auto", training_api.served_apis({training_api.TRAINJOB_CRD})) == "v2"


def test_a_group_without_the_kind_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client, _ = _client(tmp_path, monkeypatch, {"/apis/kubeflow.org/v1": MPI_ONLY})
    assert client.served_crds(training_api.CRD_VERSION) == set()
