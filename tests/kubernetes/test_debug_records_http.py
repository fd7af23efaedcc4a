"""The Kubernetes debug records through the real ``kubernetes`` client over HTTP: an API server stand-in on 127.0.0.1
(a thread in this process) answers the recorded objects, pod logs and events at the paths the client asks for, so the
requests the backend's one client makes (events by ``involvedObject.name``) are the ones a real API server gets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed")

from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.backends.registry import get_backend
from tests.kubernetes.recorded import load

NS = "/api/v1/namespaces/default"
EVENTS = {"pytorchjob-raw-ddp": "events-raw-ddp-job", "pytorchjob-raw-ddp-worker-0": "events-raw-ddp"}


def _as_served(pods: dict[str, Any]) -> dict[str, Any]:
    """The recorded pods with what an API server always gives and the recording left out (the client's models
    require it): each container's image and image ID."""
    for pod in pods["items"]:
        for status in pod["status"].get("containerStatuses") or []:
            status.setdefault("image", "ghcr.io/example/train:1")
            status.setdefault("imageID", "ghcr.io/example/train@sha256:" + "0" * 64)
    return pods


class RecordedApi(BaseHTTPRequestHandler):
    """GETs of the recorded PyTorchJob, its pods, their logs and events; anything else is a 404 Status."""

    asked: list[str] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        self.asked.append(self.path)
        if url.path == "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/pytorchjob-raw-ddp":
            self._send(load("pytorchjob-failed"))
        elif url.path == f"{NS}/pods" and query.get("labelSelector") == ["app.kubernetes.io/instance=raw-ddp"]:
            self._send(_as_served(load("pods-oomkilled")))
        elif url.path.startswith(f"{NS}/pods/") and url.path.endswith("/log"):
            self._send(f"log of {url.path.split('/')[-2]}\n", "text/plain")
        elif url.path == f"{NS}/events":
            involved = query.get("fieldSelector", [""])[0].removeprefix("involvedObject.name=")
            self._send(load(EVENTS[involved]) if involved in EVENTS else {"kind": "EventList", "apiVersion": "v1",
                                                                          "metadata": {}, "items": []})
        else:
            self._send({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                        "code": 404}, code=404)

    def _send(self, body: object, kind: str = "application/json", code: int = 200) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose cluster is the recorded API on a free port of 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordedApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "recorded",
        "clusters": [{"name": "recorded", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "nobody"}}],
        "users": [{"name": "nobody", "user": {}}]}))
    RecordedApi.asked = []
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_debug_records_over_http(kubeconfig: Path) -> None:
    handle = KubernetesHandle(helm_release="raw-ddp", namespace="default", release="raw-ddp", kind="PyTorchJob",
                              name="pytorchjob-raw-ddp", selector="app.kubernetes.io/instance=raw-ddp",
                              kubeconfig=str(kubeconfig), context="recorded")
    records = {r.name: r for r in get_backend("kubernetes").debug_records(handle)}
    assert all(r.text is not None for r in records.values()), {n: r.missing for n, r in records.items()}
    assert records["pods/pytorchjob-raw-ddp-worker-0.log"].text == "log of pytorchjob-raw-ddp-worker-0\n"
    reasons = [line.split("\t")[2] for line in (records["events.txt"].text or "").splitlines()[1:]]
    assert reasons == ["Scheduled", "OOMKilling", "PyTorchJobFailed"]
    events = [p for p in RecordedApi.asked if p.startswith(f"{NS}/events")]
    assert events == [f"{NS}/events?fieldSelector=involvedObject.name%3D{name}" for name in (
        "pytorchjob-raw-ddp", "pytorchjob-raw-ddp-master-0", "pytorchjob-raw-ddp-worker-0")]
