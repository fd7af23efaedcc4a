"""Readiness of serving workloads on Kubernetes (Deployment, LeaderWorkerSet, RayService).

No API server runs here: the objects below have the shape the API returns (status blocks as the
controllers write them), and the cluster calls are replaced by functions returning them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends.kubernetes import status
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.kubernetes.fake_cluster import FakeCluster
from tests.repo import EXAMPLES


def deployment(ready: int, replicas: int = 1) -> dict[str, Any]:
    return {"kind": "Deployment", "spec": {"replicas": replicas},
            "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}}


@pytest.mark.parametrize(
    "obj,ready",
    [
        (deployment(0), False),
        (deployment(1), True),
        (deployment(1, replicas=2), False),
        ({"kind": "LeaderWorkerSet", "status": {"conditions": [{"type": "Available", "status": "True"}]}}, True),
        ({"kind": "LeaderWorkerSet", "status": {"conditions": [{"type": "Progressing", "status": "True"}]}}, False),
        ({"kind": "RayService", "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
        ({"kind": "RayService", "status": {"serviceStatus": "Running"}}, True),
        ({"kind": "RayService", "status": {}}, False),
    ],
)
def test_server_ready(obj: dict[str, Any], ready: bool) -> None:
    assert status.server_ready(obj) is ready


def test_triton_step_reports_its_service_url_once_ready(mlhome: Path, poll_clock: list[float]) -> None:
    inputs = {"kind": "pipeline", "path": str(EXAMPLES / "eks" / "serving" / "pipeline.yaml"), "sets": []}
    state = {"obj": deployment(0)}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes", {"poll_seconds": 0.001}), inputs,
                           QuietDisplay())
    runner.backend.use_client(FakeCluster(lambda: state["obj"], list))
    backend, ctx = runner.backend, runner.context
    running = backend.submit(backend.plan(runner.spec.step("triton"), ctx), ctx)
    assert running.handle.kind == "Deployment"
    assert running.poll() is None and running.ready_url() is None
    state["obj"] = deployment(1)
    poll_clock[0] += 1  # a poll period (0.001 s) later
    assert running.poll() is None
    url = running.ready_url()
    assert url is not None and url.startswith("http://") and ".kubeflow-user-example-com.svc.cluster.local:" in url
