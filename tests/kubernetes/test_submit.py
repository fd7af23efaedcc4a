"""submit/poll/cancel of the Kubernetes backend against a recorded cluster.

No API server runs here: the backend's client is a :class:`FakeCluster` answering with the recorded
objects under ``fixtures/`` and recording install/uninstall calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrecipe.backends.base import StepState
from mlrecipe.backends.registry import get_backend
from mlrecipe.errors import ClusterError
from mlrecipe.metrics import read_progress
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.runner.state import load_record
from tests.kubernetes.fake_cluster import FakeCluster
from tests.kubernetes.recorded import load
from tests.repo import EXAMPLES

INPUTS = {
    "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
    "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
}


def _runner(**options: Any) -> ReleaseRunner:
    return ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes", options), INPUTS, QuietDisplay())


def test_submit_poll_cancel(mlhome: Path, poll_clock: list[float]) -> None:
    state = {"job": load("pytorchjob-running")}
    fake = FakeCluster(lambda: state["job"], lambda: load("pods-oomkilled")["items"], lambda name: f"log of {name}\n")
    runner = _runner(poll_seconds=0.001)
    runner.backend.use_client(fake)
    backend, ctx, step = runner.backend, runner.context, runner.spec.steps[0]
    running = backend.submit(backend.plan(step, ctx), ctx)
    assert fake.calls == [("install", "raw-ddp")], "one step: the Helm release is the release, as helm install"
    assert running.handle.kind == "PyTorchJob" and running.handle.name == "pytorchjob-raw-ddp"
    assert running.handle.selector.startswith("app.kubernetes.io/instance=raw-ddp")
    assert running.handle.context == "test-context", "the handle records the cluster it went to"
    assert running.poll() is None
    assert backend.log_path(ctx, step.name, 1).read_text() == "log of pytorchjob-raw-ddp-worker-0\n"

    state["job"] = load("pytorchjob-failed")
    poll_clock[0] += 1  # a poll period (0.001 s) later
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.FAILED and "OOMKilled" in outcome.message
    running.cancel()
    assert fake.calls[-1] == ("uninstall", "raw-ddp")


def test_refused_install_fails_the_step_with_the_reason(mlhome: Path) -> None:
    fake = FakeCluster(lambda: None, list)
    fake.refuse = ClusterError("helm install raw-ddp-x in default failed: no Kubernetes configuration found")
    runner = _runner()
    runner.backend.use_client(fake)
    assert runner.run() == 1
    record = load_record("kubernetes", "default", "raw-ddp")
    assert record is not None
    step = record.steps[runner.spec.steps[0].name]
    assert step.state is StepState.FAILED
    assert step.message.startswith("submission failed: helm install") and "no Kubernetes configuration" in step.message


@pytest.mark.parametrize("timeout,expect_failed", [(600.0, False), (0.0, True)])
def test_stuck_pods_are_reported_then_fail_the_step(mlhome: Path, timeout: float, expect_failed: bool) -> None:
    fake = FakeCluster(lambda: load("pytorchjob-running"), lambda: load("pods-pending")["items"])
    runner = _runner(stuck_timeout=timeout)
    runner.backend.use_client(fake)
    backend, ctx = runner.backend, runner.context
    running = backend.submit(backend.plan(runner.spec.steps[0], ctx), ctx)
    outcome = running.poll()
    if expect_failed:
        assert outcome is not None and outcome.state is StepState.FAILED and outcome.message.startswith("stuck for")
        assert fake.calls[-1][0] == "uninstall", "a stuck step is uninstalled"
    else:
        assert outcome is None
        assert running.progress_note().startswith("waiting: pod ")


def test_credentials_go_to_a_secret_created_before_the_release(mlhome: Path, tmp_path: Path) -> None:
    values = yaml.safe_load((EXAMPLES / "reference-style" / "pretrain-ddp.yaml").read_text())
    values["train"]["env"].append({"name": "HF_TOKEN", "value": "hf_do_not_leak"})
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(values))
    inputs = {**INPUTS, "files": [str(recipe)]}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes"), inputs, QuietDisplay())
    fake = FakeCluster(lambda: load("pytorchjob-succeeded"), list)
    runner.backend.use_client(fake)
    assert runner.run() == 0
    secret = fake.calls[0]
    assert secret[0] == "secret" and fake.calls[1] == ("install", "raw-ddp"), "the Secret exists before the pods"
    state = (mlhome / "releases" / "kubernetes" / "default" / "raw-ddp" / "state.json").read_text()
    assert "hf_do_not_leak" not in state and secret[1] in state
    assert "hf_do_not_leak" not in runner.materialize()
    runner.backend.cancel_handle(runner.backend.load_handle(
        load_record("kubernetes", "default", "raw-ddp").steps[runner.spec.steps[0].name].handle))
    assert fake.calls[-2:] == [("uninstall", "raw-ddp"), ("delete-secret", secret[1])]



def test_the_pods_report_progress_to_the_shared_volume_and_the_backend_reads_it(mlhome: Path) -> None:
    runner = _runner(poll_seconds=0.001)
    backend, ctx, step = runner.backend, runner.context, runner.spec.steps[0]
    plan = backend.plan(step, ctx)
    path = "/fsx/.mlrecipe/default/raw-ddp/pytorchjob-distributed/metrics.jsonl"
    job = next(o for o in plan.objects if o["kind"] == "PyTorchJob")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        env = {e["name"]: e.get("value") for e in replica["template"]["spec"]["containers"][0]["env"]}
        assert env["MLRECIPE_METRICS_FILE"] == path, "every pod writes to the step's file on the shared volume"
    lines = "".join(f'{{"time": {t}, "step": {s}, "total": 100, "metrics": {{"loss": {4 - s / 50}}}}}\n'
                    for t, s in ((10.0, 10), (20.0, 30)))
    fake = FakeCluster(lambda: load("pytorchjob-running"), lambda: load("pods-oomkilled")["items"],
                       files={f"pytorchjob-raw-ddp-master-0:{path}": lines})
    backend.use_client(fake)
    running = backend.submit(plan, ctx)
    assert running.handle.metrics_file == path
    assert running.poll() is None
    assert ("tail", f"pytorchjob-raw-ddp-master-0:{path}") in fake.calls, "read in the running pod of rank 0"
    progress = read_progress(backend.metrics_path(ctx, step.name))
    assert progress is not None and (progress.step, progress.total) == (30, 100)
    assert progress.metrics == {"loss": 3.4} and progress.rate == 2.0


def test_a_step_without_a_shared_volume_has_no_metrics_file(mlhome: Path, tmp_path: Path) -> None:
    values = yaml.safe_load((EXAMPLES / "reference-style" / "pretrain-ddp.yaml").read_text())
    values["pvc"] = []
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(values))
    inputs = {**INPUTS, "files": [str(recipe)]}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes"), inputs, QuietDisplay())
    plan = runner.backend.plan(runner.spec.steps[0], runner.context)
    assert plan.metrics_file is None and "name: \"MLRECIPE_METRICS_FILE\"" not in plan.manifest_text
