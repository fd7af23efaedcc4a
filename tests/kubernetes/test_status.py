"""Status interpretation of the Kubernetes backend.

The fixtures under ``fixtures/`` are recorded API responses (PyTorchJob, Job, RayJob objects and
PodLists as ``kubectl get -o json`` returns them): no API server runs in this test environment.
"""

from __future__ import annotations

import pytest

from mlrecipe.backends.kubernetes.status import pod_state, step_outcome, stuck_reason, workload_outcome
from tests.kubernetes.recorded import load


@pytest.mark.parametrize(
    ("fixture", "state"),
    [
        ("pytorchjob-succeeded", "succeeded"),
        ("pytorchjob-running", None),
        ("pytorchjob-failed", "failed"),
        ("job-complete", "succeeded"),
        ("job-failed", "failed"),
        ("rayjob-succeeded", "succeeded"),
        ("rayjob-running", None),
        ("rayjob-failed", "failed"),
    ],
)
def test_workload_outcome(fixture: str, state: str | None) -> None:
    outcome = workload_outcome(load(fixture))
    assert (outcome.state if outcome else None) == state


def test_pytorchjob_failure_names_oomkilled_rank() -> None:
    outcome = step_outcome(load("pytorchjob-failed"), load("pods-oomkilled")["items"])
    assert outcome is not None and outcome.state == "failed"
    assert "1 Worker replica(s) failed" in outcome.message
    assert "pytorchjob-raw-ddp-worker-0 container pytorch: OOMKilled, exit code 137" in outcome.message
    assert outcome.failed_rank == 1 and outcome.exit_code == 137


def test_job_failure_carries_exit_code() -> None:
    outcome = step_outcome(load("job-failed"), load("pods-job-exit")["items"])
    assert outcome is not None
    assert outcome.exit_code == 3 and outcome.failed_rank == 0
    assert "BackoffLimitExceeded" in outcome.message and "exit code 3" in outcome.message


def test_rayjob_failure_message() -> None:
    outcome = workload_outcome(load("rayjob-failed"))
    assert outcome is not None and "exit code 1" in outcome.message


def test_running_workload_is_not_failed_by_pending_pods() -> None:
    pods = load("pods-pending")["items"]
    assert step_outcome(load("pytorchjob-running"), pods) is None
    reason = stuck_reason(pods)
    assert "ImagePullBackOff" in reason and "24.10-py4" in reason
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu" in reason


def test_success_ignores_pod_history() -> None:
    outcome = step_outcome(load("pytorchjob-succeeded"), load("pods-oomkilled")["items"])
    assert outcome is not None and outcome.state == "succeeded" and outcome.exit_code == 0


@pytest.mark.parametrize(("status", "state"), [
    ({"jobStatus": "STOPPED"}, "failed"),
    ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed", "message": "head pod lost"}, "failed"),
    ({"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Failed"}, "succeeded"),
    ({"jobStatus": "PENDING", "jobDeploymentStatus": "Complete"}, None),
])
def test_rayjob_words_map_through_the_one_table(status: dict[str, str], state: str | None) -> None:
    outcome = workload_outcome({"kind": "RayJob", "status": status})
    assert (outcome.state if outcome else None) == state


def test_a_failed_condition_wins_over_success_and_unknown_words_say_nothing() -> None:
    conds = [{"type": "Succeeded", "status": "True"}, {"type": "Failed", "status": "True", "reason": "BackoffLimit"},
             {"type": "SuccessCriteriaMet", "status": "True"}]
    outcome = workload_outcome({"kind": "Job", "status": {"conditions": conds}})
    assert outcome is not None and outcome.state == "failed" and outcome.message == "Job failed: BackoffLimit"
    assert workload_outcome({"kind": "Job", "status": {"conditions": conds[2:]}}) is None
    assert [pod_state({"status": {"phase": p}}) for p in ("Running", "Pending", "Unknown")] == ["running", "pending",
                                                                                             None]


def test_a_containers_termination_message_is_in_the_reason() -> None:
    """The step runtime's watchdog writes its hang reason to /dev/termination-log; the reason shows it."""
    pods = load("pods-job-exit")["items"]
    state = pods[0]["status"]["containerStatuses"][0]["state"]
    state["terminated"] = {**state["terminated"], "exitCode": 124,
                           "message": "hang: no progress for 10m; stacks in /efs/home/r/logs/train/hang-1\nmore"}
    outcome = step_outcome(load("job-failed"), pods)
    assert outcome is not None and outcome.exit_code == 124
    assert "exit code 124: hang: no progress for 10m; stacks in /efs/home/r/logs/train/hang-1" in outcome.message
    assert "more" not in outcome.message
