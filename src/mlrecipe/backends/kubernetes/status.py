"""Read how a step went from the API objects (plain dicts as the API server returns them).

Pure functions, no client: ``workload_outcome`` interprets the custom resource's own status
(PyTorchJob / MPIJob conditions, RayJob ``jobStatus``, Job conditions), ``pod_problems`` turns pod
statuses into the reasons a user acts on (image pull, scheduling, OOM, exit codes).
"""

from __future__ import annotations

from typing import Any

from mlrecipe.backends.base import StepOutcome, StepState

#: Kubernetes' words for how a step stands, as step states, in one table: a training or batch Job's true
#: conditions (``Created``, ``Running``, ``Succeeded`` / ``Complete``, ``Failed``; a TrainJob's ``Suspended``: waiting),
#: a RayJob's ``jobStatus`` (upper case) and ``jobDeploymentStatus`` (``Failed``), a pod's phase, an older
#: RayService's ``serviceStatus`` (``Running``: serving). Words not listed say nothing about the outcome.
KUBERNETES_STATES: dict[str, StepState] = {
    "Created": StepState.PENDING, "Pending": StepState.PENDING, "PENDING": StepState.PENDING,
    "Running": StepState.RUNNING, "Restarting": StepState.RUNNING, "RUNNING": StepState.RUNNING,
    "Suspended": StepState.PENDING,
    "Succeeded": StepState.SUCCEEDED, "Complete": StepState.SUCCEEDED, "SUCCEEDED": StepState.SUCCEEDED,
    "Failed": StepState.FAILED, "FAILED": StepState.FAILED, "STOPPED": StepState.FAILED,
}
_WAITING_FATAL = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
                  "CreateContainerError", "CrashLoopBackOff"}


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The object's true conditions by type (latest wins)."""
    out: dict[str, dict[str, Any]] = {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if str(cond.get("status", "")).lower() == "true":
            out[str(cond.get("type"))] = cond
    return out


def _cond_message(cond: dict[str, Any]) -> str:
    return ": ".join(p for p in (cond.get("reason"), cond.get("message")) if p)


def workload_outcome(obj: dict[str, Any]) -> StepOutcome | None:
    """The outcome a workload object reports, or ``None`` while it runs.

    PyTorchJob/MPIJob: conditions ``Succeeded`` / ``Failed``; Job and TrainJob: ``Complete`` / ``Failed`` (a
    TrainJob's ``Created`` and ``Suspended`` say it waits);
    RayJob: ``status.jobStatus`` ``SUCCEEDED`` / ``FAILED`` / ``STOPPED`` (and ``jobDeploymentStatus``
    ``Failed``). Other kinds (servers) never finish by themselves: ``None``.
    """
    kind = obj.get("kind")
    if kind in ("PyTorchJob", "TrainJob", "MPIJob", "Job"):
        conds = _conditions(obj)
        ended = {KUBERNETES_STATES.get(name): cond for name, cond in conds.items()}
        if StepState.FAILED in ended:
            detail = _cond_message(ended[StepState.FAILED])
            return StepOutcome(StepState.FAILED, None, f"{kind} failed: {detail}".rstrip(": "))
        return StepOutcome(StepState.SUCCEEDED, 0) if StepState.SUCCEEDED in ended else None
    if kind == "RayJob":
        status = obj.get("status") or {}
        job, deploy = status.get("jobStatus"), status.get("jobDeploymentStatus")
        job_state = KUBERNETES_STATES.get(str(job))
        if job_state is StepState.SUCCEEDED:
            return StepOutcome(StepState.SUCCEEDED, 0)
        if job_state is StepState.FAILED or KUBERNETES_STATES.get(str(deploy)) is StepState.FAILED:
            detail = status.get("message") or status.get("reason") or f"jobStatus {job}, deployment {deploy}"
            return StepOutcome(StepState.FAILED, None, f"RayJob failed: {detail}")
        return None
    return None


def pod_state(pod: dict[str, Any]) -> StepState | None:
    """A pod's phase as a step state (``None`` for ``Unknown`` or no phase yet)."""
    return KUBERNETES_STATES.get(str((pod.get("status") or {}).get("phase")))


def pod_rank(pod: dict[str, Any]) -> int | None:
    """The node rank of a pod (a PyTorchJob worker's index is shifted past the master)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get("training.kubeflow.org/replica-type") == "worker":
        return int(labels.get("training.kubeflow.org/replica-index", "0")) + 1
    for key in ("training.kubeflow.org/replica-index", "batch.kubernetes.io/job-completion-index",
                "mlrecipe.io/rank"):
        if str(labels.get(key, "")).isdigit():
            return int(labels[key])
    return None


def pod_problems(pod: dict[str, Any]) -> list[tuple[int | None, int | None, str]]:
    """(rank, exit code, reason) for each problem a pod shows; empty for a healthy pod."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    rank = pod_rank(pod)
    out: list[tuple[int | None, int | None, str]] = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            out.append((rank, None, f"pod {name}: Unschedulable: {cond.get('message', '')}".rstrip(": ")))
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        waiting, term = state.get("waiting"), state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if waiting and waiting.get("reason") in _WAITING_FATAL:
            msg = waiting.get("message") or ""
            out.append((rank, None, f"pod {name} container {cs.get('name')}: {waiting['reason']} {msg}".rstrip()))
        elif term and term.get("exitCode", 0) != 0:
            code = int(term["exitCode"])
            reason = term.get("reason") or "Error"
            told = (term.get("message") or "").strip().splitlines()  # the container's termination message
            said = f": {told[0]}" if told else ""
            out.append((rank, code, f"pod {name} container {cs.get('name')}: {reason}, exit code {code}{said}"))
    return out


def failure_from_pods(pods: list[dict[str, Any]]) -> tuple[int | None, int | None, str]:
    """(first failed rank, its exit code, one line per pod problem) over all pods of a step."""
    problems = [p for pod in pods for p in pod_problems(pod)]
    if not problems:
        return None, None, ""
    ranked = sorted(problems, key=lambda p: (p[1] is None, p[0] if p[0] is not None else 1 << 30))
    return ranked[0][0], ranked[0][1], "; ".join(p[2] for p in problems)


def step_outcome(workload: dict[str, Any], pods: list[dict[str, Any]]) -> StepOutcome | None:
    """The workload's outcome, with the pods' reasons folded into a failure's message.

    A pod that cannot start (image pull, unschedulable for good) does not fail the workload by
    itself; it is reported by :func:`stuck_reason` instead.
    """
    outcome = workload_outcome(workload)
    if outcome is None or outcome.state is not StepState.FAILED:
        return outcome
    rank, code, detail = failure_from_pods(pods)
    if detail:
        outcome.message = f"{outcome.message}; {detail}" if outcome.message else detail
    outcome.failed_rank, outcome.exit_code = rank, code
    return outcome


def stuck_reason(pods: list[dict[str, Any]]) -> str:
    """Why pods of a running step make no progress (image pull, unschedulable), or ``""``."""
    return "; ".join(p[2] for pod in pods for p in pod_problems(pod) if p[1] is None)


def server_ready(obj: dict[str, Any]) -> bool:
    """Whether a serving workload is ready: Deployment replicas ready, LeaderWorkerSet ``Available``,
    RayService ``Ready`` (or the older ``serviceStatus: Running``)."""
    kind = obj.get("kind")
    st = obj.get("status") or {}
    if kind == "Deployment":
        want = int((obj.get("spec") or {}).get("replicas") or 1)
        return int(st.get("readyReplicas") or 0) >= want
    conds = _conditions(obj)
    if kind == "LeaderWorkerSet":
        return conds.get("Available", {}).get("status") == "True"
    if kind == "RayService":
        older = KUBERNETES_STATES.get(str(st.get("serviceStatus"))) is StepState.RUNNING
        return conds.get("Ready", {}).get("status") == "True" or older
    return False
