"""submit/poll/cancel of the Kubernetes backend with the cluster calls replaced by recorded responses.

No API server runs here: ``mlrecipe.backends.kubernetes.cluster`` is patched to return the recorded
objects under ``fixtures/`` and to record install/uninstall calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends.kubernetes import cluster
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.conftest import EXAMPLES
from tests.kubernetes.test_status import load

INPUTS = {
    "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
    "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
}


def test_submit_poll_cancel(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []
    state = {"job": load("pytorchjob-running")}
    monkeypatch.setattr(cluster, "install", lambda plan, options: calls.append(("install", plan.helm_release)))
    monkeypatch.setattr(cluster, "uninstall", lambda rel, ns, options: calls.append(("uninstall", rel)))
    monkeypatch.setattr(cluster, "get_object", lambda kind, name, ns, options: state["job"])
    monkeypatch.setattr(cluster, "list_pods", lambda ns, sel, options: load("pods-oomkilled")["items"])
    monkeypatch.setattr(cluster, "pod_log", lambda name, ns, options: f"log of {name}\n")

    runner = ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes"), INPUTS, QuietDisplay())
    backend, ctx, step = runner.backend, runner.context, runner.spec.steps[0]
    running = backend.submit(backend.plan(step, ctx), ctx)
    assert calls == [("install", f"raw-ddp-{step.name}")]
    assert running.handle["kind"] == "PyTorchJob" and running.handle["name"] == f"pytorchjob-raw-ddp-{step.name}"
    assert running.handle["selector"].startswith("app.kubernetes.io/instance=raw-ddp")
    assert running.poll() is None
    assert backend.log_path(ctx, step.name, 1).read_text() == "log of pytorchjob-raw-ddp-worker-0\n"

    state["job"] = load("pytorchjob-failed")
    outcome = running.poll()
    assert outcome is not None and outcome.state == "failed" and "OOMKilled" in outcome.message
    running.cancel()
    assert calls[-1] == ("uninstall", f"raw-ddp-{step.name}")


def test_refused_install_fails_the_step(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(plan: Any, options: Any) -> None:
        raise cluster.ClusterError("no Kubernetes configuration found")

    monkeypatch.setattr(cluster, "install", refuse)
    runner = ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes"), INPUTS, QuietDisplay())
    backend, ctx = runner.backend, runner.context
    outcome = backend.submit(backend.plan(runner.spec.steps[0], ctx), ctx).poll()
    assert outcome is not None and outcome.state == "failed"
    assert "no Kubernetes configuration found" in outcome.message


@pytest.mark.parametrize("timeout,expect_failed", [(600.0, False), (0.0, True)])
def test_stuck_pods_are_reported_then_fail_the_step(
    mlhome: Path, monkeypatch: pytest.MonkeyPatch, timeout: float, expect_failed: bool
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cluster, "install", lambda plan, options: None)
    monkeypatch.setattr(cluster, "uninstall", lambda rel, ns, options: calls.append(rel))
    monkeypatch.setattr(cluster, "get_object", lambda kind, name, ns, options: load("pytorchjob-running"))
    monkeypatch.setattr(cluster, "list_pods", lambda ns, sel, options: load("pods-pending")["items"])
    monkeypatch.setattr(cluster, "pod_log", lambda name, ns, options: "")
    runner = ReleaseRunner(spec_from_inputs(INPUTS), get_backend("kubernetes"), INPUTS, QuietDisplay(),
                           options={"stuck_timeout": timeout})
    backend, ctx = runner.backend, runner.context
    running = backend.submit(backend.plan(runner.spec.steps[0], ctx), ctx)
    outcome = running.poll()
    if expect_failed:
        assert outcome is not None and outcome.state == "failed" and outcome.message.startswith("stuck for")
        assert calls, "a stuck step is uninstalled"
    else:
        assert outcome is None
        assert running.progress_note().startswith("waiting: pod ")
