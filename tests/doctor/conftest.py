"""Fixtures of the doctor tests: an isolated MLRECIPE_HOME, and a fake Kubernetes API server that
serves the JSON files under fixtures/kubernetes/ through the official client's REST layer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NAMESPACE = "kubeflow-user-example-com"
ROUTES = {
    "/version": "version.json",
    "/version/": "version.json",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": "crds.json",
    "/apis/apps/v1/daemonsets": "daemonsets.json",
    "/api/v1/nodes": "nodes.json",
    "/apis/storage.k8s.io/v1/storageclasses": "storageclasses.json",
    f"/api/v1/namespaces/{NAMESPACE}": "namespace.json",
    f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims": "pvcs.json",
    "/apis/karpenter.sh/v1/nodepools": "nodepools.json",
}
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: ml-dev
  cluster:
    server: https://ABCDEF0123456789ABCDEF0123456789.gr7.us-west-2.eks.amazonaws.com
    insecure-skip-tls-verify: true
contexts:
- name: ml-dev
  context:
    cluster: ml-dev
    user: ml-dev-admin
current-context: ml-dev
users:
- name: ml-dev-admin
  user:
    token: k8s-aws-v1.recorded-test-token
"""


@pytest.fixture
def mlrecipe_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh MLRECIPE_HOME for the test."""
    home = tmp_path / "mlrecipe-home"
    monkeypatch.setenv("MLRECIPE_HOME", str(home))
    return home


class FakeApiServer:
    """Answers the client's GETs from recorded payloads; unknown paths get a 404 Status."""

    def __init__(self) -> None:
        self.payloads: dict[str, Any] = {
            path: json.loads((FIXTURES / "kubernetes" / name).read_text()) for path, name in ROUTES.items()
        }
        self.requests: list[tuple[str, str]] = []
        self.fail_with: int | None = None

    def respond(self, method: str, url: str) -> Any:
        from kubernetes.client.rest import RESTResponse

        path = urlparse(url).path
        self.requests.append((method, path))
        status, payload = 200, self.payloads.get(path)
        if self.fail_with is not None:
            status, payload = (
                self.fail_with,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": "Unauthorized",
                    "reason": "Unauthorized",
                    "code": self.fail_with,
                },
            )
        elif payload is None:
            status = 404
            payload = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"the server could not find the requested resource ({path})",
                "reason": "NotFound",
                "details": {},
                "code": 404,
            }
        raw = SimpleNamespace(
            status=status,
            reason="OK" if status == 200 else "Error",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "content-type": "application/json"},
        )
        return RESTResponse(raw)


@pytest.fixture
def fake_kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """A kubeconfig pointing at an EKS-like endpoint, and the REST layer answering from fixtures.

    No API server runs on these machines: the official client builds every request and deserializes
    every answer as usual; only the HTTP round trip is replaced."""
    kubernetes = pytest.importorskip("kubernetes")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    server = FakeApiServer()

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        return server.respond(method, url)

    monkeypatch.setattr(kubernetes.client.rest.RESTClientObject, "request", request)
    yield server
