"""A local training job's typed record, its store, and the DescribeTrainingJob / ListTrainingJobs answers built
from it. The record is stored as JSON (``training-jobs/<name>/training-job.json``) with the same keys as its
fields; the status is SageMaker's word for it."""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.backends.sagemaker.local.store import Store, TypedStore, arn, when

FAILURE_REASON_MAX = 1024


class JobStatus(str, enum.Enum):
    """``TrainingJobStatus``."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def ended(self) -> bool:
        return self in TERMINAL

    @property
    def running(self) -> bool:
        """In progress or stopping: its supervisor (or what is left of it) still has hosts to end."""
        return self in (JobStatus.IN_PROGRESS, JobStatus.STOPPING)


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED})


@dataclass
class TrainingJobRecord:
    """One local training job: its request, SageMaker's statuses and times (epoch seconds), and ``local``, the plan
    its supervisor runs (argv, hosts with their env, mounts and logs, GPUs to lease, limits)."""

    request: dict[str, Any]
    arn: str
    local: dict[str, Any]
    status: JobStatus = JobStatus.IN_PROGRESS
    secondary: str = "Starting"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    failure_reason: str | None = None
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    modified: float = 0.0
    model_artifacts: str | None = None

    @property
    def name(self) -> str:
        return str(self.request["TrainingJobName"])

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainingJobRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "status": JobStatus(data["status"])})


class JobStore(TypedStore[TrainingJobRecord]):
    """The training jobs under a root, as typed records."""

    def __init__(self, root: Path) -> None:
        super().__init__(Store(root, "training-job", nested=True), TrainingJobRecord)


def new_record(request: dict[str, Any], local: dict[str, Any]) -> TrainingJobRecord:
    now = time.time()
    return TrainingJobRecord(request=request, arn=arn("training-job", request["TrainingJobName"]), local=local,
                             transitions=[{"Status": "Starting", "StartTime": now,
                                           "StatusMessage": "Preparing the instances for training"}],
                             created=now, modified=now)


def set_secondary(record: TrainingJobRecord, secondary: str, message: str, status: JobStatus | None = None) -> None:
    """Move the job to ``secondary`` (and ``status``), closing the previous transition."""
    now = time.time()
    if record.transitions and record.transitions[-1].get("EndTime") is None:
        record.transitions[-1]["EndTime"] = now
    record.transitions.append({"Status": secondary, "StartTime": now, "StatusMessage": message})
    record.secondary = secondary
    if status is not None:
        record.status = status
    if record.status.ended:
        record.transitions[-1]["EndTime"] = now
        record.ended = record.ended or now
    record.modified = now


def fail(record: TrainingJobRecord, reason: str) -> None:
    record.failure_reason = reason[:FAILURE_REASON_MAX]
    set_secondary(record, "Failed", reason[:FAILURE_REASON_MAX], JobStatus.FAILED)


def billable_seconds(record: TrainingJobRecord) -> int | None:
    if record.started is None:
        return None
    end = record.ended or time.time()
    return max(1, math.ceil(end - record.started))


def describe(record: TrainingJobRecord) -> dict[str, Any]:
    """DescribeTrainingJob's response for ``record``."""
    req = record.request
    out: dict[str, Any] = {
        "TrainingJobName": req["TrainingJobName"], "TrainingJobArn": record.arn,
        "ModelArtifacts": {"S3ModelArtifacts": record.model_artifacts or ""},
        "TrainingJobStatus": record.status.value, "SecondaryStatus": record.secondary,
        "HyperParameters": req.get("HyperParameters") or {}, "AlgorithmSpecification": req["AlgorithmSpecification"],
        "RoleArn": req.get("RoleArn", ""), "InputDataConfig": req.get("InputDataConfig") or [],
        "OutputDataConfig": req.get("OutputDataConfig") or {}, "ResourceConfig": req["ResourceConfig"],
        "StoppingCondition": req.get("StoppingCondition") or {}, "CreationTime": when(record.created),
        "LastModifiedTime": when(record.modified),
        "SecondaryStatusTransitions": [
            {k: (when(v) if k.endswith("Time") else v) for k, v in t.items()} for t in record.transitions],
        "Environment": req.get("Environment") or {},
        "ResponseMetadata": {"HTTPStatusCode": 200},
    }
    for key in ("VpcConfig", "CheckpointConfig", "EnableNetworkIsolation", "EnableManagedSpotTraining",
                "EnableInterContainerTrafficEncryption"):
        if key in req:
            out[key] = req[key]
    if record.failure_reason:
        out["FailureReason"] = record.failure_reason
    if record.started is not None:
        out["TrainingStartTime"] = when(record.started)
        out["TrainingTimeInSeconds"] = out["BillableTimeInSeconds"] = billable_seconds(record)
    if record.ended is not None:
        out["TrainingEndTime"] = when(record.ended)
    if not record.model_artifacts:
        del out["ModelArtifacts"]
    return out


def summary(record: TrainingJobRecord) -> dict[str, Any]:
    """One entry of ListTrainingJobs' ``TrainingJobSummaries``."""
    out = {"TrainingJobName": record.name, "TrainingJobArn": record.arn,
           "CreationTime": when(record.created), "LastModifiedTime": when(record.modified),
           "TrainingJobStatus": record.status.value, "SecondaryStatus": record.secondary}
    if record.ended is not None:
        out["TrainingEndTime"] = when(record.ended)
    return out
