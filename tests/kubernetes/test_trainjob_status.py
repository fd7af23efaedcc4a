"""A TrainJob's conditions through the state table, its JobSet's pods (label ``jobset.sigs.k8s.io/jobset-name``) for
logs and ranks, and ``training_api: auto`` deciding from the CRDs a cluster serves.

No API server runs here: TrainJob objects and pod lists under ``fixtures/`` are written in the shape the API
returns them (Trainer v2.3.0's condition types and reasons), the client is a :class:`FakeCluster`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends.base import StepState
from mlrecipe.backends.kubernetes import status, training_api
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.kubernetes.fake_cluster import FakeCluster
from tests.kubernetes.recorded import load
from tests.repo import EXAMPLES

INPUTS = {
    "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
    "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
}


class ServingCrds(FakeCluster):
    """A recorded cluster that serves the CRDs ``crds``."""

    def __init__(self, crds: set[str], **kwargs: Any) -> None:
        super().__init__(kwargs.pop("workload", lambda: None), kwargs.pop("pods", list), **kwargs)
        self.crds = crds

    def served_crds(self, crds: dict[str, str]) -> set[str]:
        self.calls.append(("crds", ",".join(crds)))
        return self.crds & set(crds)


def _runner(**options: Any) -> ReleaseRunner:
    return ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes", options), INPUTS, QuietDisplay())


@pytest.mark.parametrize(("fixture", "state"), [
    ("trainjob-running", None), ("trainjob-suspended", None),
    ("trainjob-complete", StepState.SUCCEEDED), ("trainjob-failed", StepState.FAILED),
])
def test_trainjob_conditions_map_through_the_state_table(fixture: str, state: StepState | None) -> None:
    outcome = status.workload_outcome(load(fixture))
    assert (outcome.state if outcome else None) is state
    if state is StepState.FAILED:
        assert outcome is not None and "TrainJob failed: JobSetFailed" in outcome.message
    assert status.KUBERNETES_STATES["Suspended"] is StepState.PENDING


def test_a_v2_step_follows_its_jobset_pods(mlhome: Path, poll_clock: list[float]) -> None:
    state = {"job": load("trainjob-running")}
    fake = ServingCrds(set(), workload=lambda: state["job"], pods=lambda: load("pods-trainjob-oomkilled")["items"],
                       logs=lambda name: f"log of {name}\n")
    runner = _runner(training_api="v2", poll_seconds=0.001)
    runner.backend.use_client(fake)
    backend, ctx, step = runner.backend, runner.context, runner.spec.steps[0]
    running = backend.submit(backend.plan(step, ctx), ctx)
    assert running.handle.kind == "TrainJob" and running.handle.name == "trainjob-raw-ddp"
    assert running.handle.selector == "jobset.sigs.k8s.io/jobset-name=trainjob-raw-ddp"
    assert ("crds", ",".join(training_api.CRD_VERSION)) not in fake.calls, "an explicit v2 asks nothing"
    assert running.poll() is None
    assert backend.log_path(ctx, step.name, 1).read_text() == "log of trainjob-raw-ddp-node-0-1-x1k2p\n"
    state["job"] = load("trainjob-failed")
    poll_clock[0] += 1  # a poll period (0.001 s) later
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.FAILED
    assert outcome.failed_rank == 1 and outcome.exit_code == 137 and "OOMKilled" in outcome.message


@pytest.mark.parametrize(("crds", "api"), [
    ({training_api.TRAINJOB_CRD}, "v2"),
    ({training_api.TRAINJOB_CRD, training_api.PYTORCHJOB_CRD}, "v1"),
    ({training_api.PYTORCHJOB_CRD}, "v1"),
    (set(), "v1"),
])
def test_auto_asks_the_cluster_once(crds: set[str], api: str, mlhome: Path) -> None:
    fake = ServingCrds(crds)
    runner = _runner()
    runner.backend.use_client(fake)
    plan = runner.backend.plan(runner.spec.steps[0], runner.context)
    runner.backend.plan(runner.spec.steps[0], runner.context)
    assert plan.workload_kind() == ("TrainJob" if api == "v2" else "PyTorchJob")
    said = [n for n in plan.notes if n.startswith("training_api auto:")]
    assert said == (["training_api auto: the cluster serves TrainJob (Kubeflow Trainer v2) and not PyTorchJob, so "
                     "this step is a TrainJob"] if api == "v2" else [])
    assert [c for c in fake.calls if c[0] == "crds"] == [("crds", ",".join(training_api.CRD_VERSION))]


def test_auto_without_a_cluster_is_v1(mlhome: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    runner = _runner()
    plan = runner.backend.plan(runner.spec.steps[0], runner.context)
    assert plan.workload() is not None and plan.workload()["kind"] == "PyTorchJob"
    explicit = _runner(training_api="v2")
    assert explicit.backend.plan(explicit.spec.steps[0], explicit.context).workload()["kind"] == "TrainJob"
