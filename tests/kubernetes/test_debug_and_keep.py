"""What a Kubernetes step still holds goes into a debug bundle (workload, pods, pod logs, events: recorded
responses behind the backend's one client), and ``--keep-on-failure`` leaves a failed step's Helm release installed."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import CollectsDebugRecords, StepState
from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.backends.registry import get_backend
from mlrecipe.errors import ClusterError
from mlrecipe.runner.bundle import collect
from mlrecipe.runner.progress import Display
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.runner.state import load_record
from mlrecipe.runner.step_backends import StepBackends
from tests.kubernetes.fake_cluster import FakeCluster
from tests.kubernetes.recorded import load
from tests.repo import EXAMPLES

INPUTS = {
    "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
    "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
}
HANDLE = KubernetesHandle(helm_release="raw-ddp", namespace="default", release="raw-ddp", kind="PyTorchJob",
                          name="pytorchjob-raw-ddp", selector="app.kubernetes.io/instance=raw-ddp")
EVENTS = {"pytorchjob-raw-ddp": "events-raw-ddp-job", "pytorchjob-raw-ddp-worker-0": "events-raw-ddp"}


class EventfulCluster(FakeCluster):
    """The recorded cluster, with the recorded events of the workload and of its failed worker pod."""

    def list_events(self, namespace: str, involved: str) -> list[dict[str, Any]]:
        self.calls.append(("events", involved))
        return load(EVENTS[involved])["items"] if involved in EVENTS else []


def _failed_cluster() -> EventfulCluster:
    return EventfulCluster(lambda: load("pytorchjob-failed"), lambda: load("pods-oomkilled")["items"],
                           lambda name: f"log of {name}\nRuntimeError: CUDA out of memory\n")


def _runner(display: Display | None = None, **kwargs: Any) -> ReleaseRunner:
    return ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes", {"poll_seconds": 0.001}), INPUTS,
                         display or Display(io.StringIO()), **kwargs)


def test_kubernetes_declares_the_capability() -> None:
    backend = get_backend("kubernetes")
    assert issubclass(type(backend), CollectsDebugRecords)
    assert not issubclass(type(get_backend("local")), CollectsDebugRecords), "local: all is in the step directory"


def test_debug_records_of_a_failed_step(mlhome: Path) -> None:
    backend = get_backend("kubernetes")
    backend.use_client(_failed_cluster())
    records = {r.name: r for r in backend.debug_records(HANDLE)}
    assert list(records) == ["workload.json", "pods.json", "pods/pytorchjob-raw-ddp-master-0.log",
                             "pods/pytorchjob-raw-ddp-worker-0.log", "events.txt"]
    workload = json.loads(records["workload.json"].text or "")
    assert workload["status"]["conditions"][-1]["type"] == "Failed"
    assert [p["metadata"]["name"] for p in json.loads(records["pods.json"].text or "")] == [
        "pytorchjob-raw-ddp-master-0", "pytorchjob-raw-ddp-worker-0"]
    assert "CUDA out of memory" in (records["pods/pytorchjob-raw-ddp-worker-0.log"].text or "")
    events = (records["events.txt"].text or "").splitlines()
    assert events[0].startswith("LAST SEEN\tTYPE\tREASON")
    assert [line.split("\t")[2] for line in events[1:]] == ["Scheduled", "OOMKilling", "PyTorchJobFailed"], \
        "the workload's and the pods' events, oldest first"


def test_what_the_cluster_no_longer_has_or_refuses_is_named(mlhome: Path) -> None:
    backend = get_backend("kubernetes")
    backend.use_client(EventfulCluster(lambda: None, list))
    gone = {r.name: r for r in backend.debug_records(HANDLE)}
    assert gone["workload.json"].text is None and "no longer in namespace default" in gone["workload.json"].missing
    assert gone["pods.json"].text is None and "no pod matches app.kubernetes.io/instance=raw-ddp" in \
        gone["pods.json"].missing

    def refuse() -> list[dict[str, Any]]:
        raise ClusterError("listing pods: 403 Forbidden", 403)

    backend.use_client(EventfulCluster(lambda: load("pytorchjob-failed"), refuse))
    refused = {r.name: r for r in backend.debug_records(HANDLE)}
    assert refused["workload.json"].text is not None
    assert refused["pods.json"].text is None and "403 Forbidden" in refused["pods.json"].missing

    def unreadable() -> list[dict[str, Any]]:
        raise ValueError("1 validation error for V1ContainerStatus")

    backend.use_client(EventfulCluster(lambda: load("pytorchjob-failed"), unreadable))
    odd = {r.name: r for r in backend.debug_records(HANDLE)}
    assert "V1ContainerStatus" in odd["pods.json"].missing, "an answer the client cannot read is named, not raised"


def test_a_bundle_holds_what_the_cluster_holds(mlhome: Path, tmp_path: Path) -> None:
    runner = _runner()
    runner.backend.use_client(_failed_cluster())
    assert runner.run() == 1
    record = load_record("kubernetes", "default", "raw-ddp")
    assert record is not None
    said: list[str] = []
    bundle = collect(record, StepBackends(runner.backend), None, tmp_path / "b.tar.gz", said.append, {})
    step = runner.spec.steps[0].name
    assert f"backend/{step}/events.txt" in bundle.names and f"backend/{step}/pods.json" in bundle.names
    assert f"steps/{step}/rank-1.log" in bundle.names, "the pod logs the step's poll copied"
    assert any("asking kubernetes" in line for line in said)
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        manifest = (tar.extractfile("b/MANIFEST.txt") or io.BytesIO()).read().decode()
        assert "b/backend/" + step + "/events.txt" in tar.getnames()
    assert f"backend/{step}/events.txt" in manifest


def test_keep_on_failure_leaves_a_stuck_step_installed_and_says_so(mlhome: Path) -> None:
    fake = EventfulCluster(lambda: load("pytorchjob-running"), lambda: load("pods-pending")["items"])
    out = io.StringIO()
    runner = ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes", {"stuck_timeout": 0.0}), INPUTS,
                           Display(out), keep_on_failure=True)
    runner.backend.use_client(fake)
    assert runner.run() == 1
    assert ("uninstall", "raw-ddp") not in fake.calls, "kept: the stuck step's pods stay to be looked at"
    told = out.getvalue()
    assert "kept for inspection (--keep-on-failure): step" in told and "Helm release raw-ddp in namespace default" \
        in told and "mlrecipe uninstall kubernetes://default/raw-ddp" in told, told
    record = load_record("kubernetes", "default", "raw-ddp")
    assert record is not None and next(iter(record.steps.values())).state is StepState.FAILED


def test_without_keep_on_failure_a_stuck_step_is_uninstalled(mlhome: Path) -> None:
    fake = EventfulCluster(lambda: load("pytorchjob-running"), lambda: load("pods-pending")["items"])
    out = io.StringIO()
    runner = ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes", {"stuck_timeout": 0.0}), INPUTS,
                           Display(out))
    runner.backend.use_client(fake)
    assert runner.run() == 1
    assert ("uninstall", "raw-ddp") in fake.calls and "kept for inspection" not in out.getvalue()
