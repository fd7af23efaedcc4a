"""A local training job's record and the DescribeTrainingJob / ListTrainingJobs answers built from it."""

from __future__ import annotations

import math
import time
from typing import Any

from mlrecipe.backends.sagemaker.local.store import arn, when

TERMINAL = ("Completed", "Failed", "Stopped")
FAILURE_REASON_MAX = 1024


def new_record(request: dict[str, Any], local: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    return {"request": request, "arn": arn("training-job", request["TrainingJobName"]), "status": "InProgress",
            "secondary": "Starting", "transitions": [{"Status": "Starting", "StartTime": now,
                                                      "StatusMessage": "Preparing the instances for training"}],
            "failure_reason": None, "created": now, "started": None, "ended": None, "modified": now,
            "model_artifacts": None, "local": local}


def set_secondary(record: dict[str, Any], secondary: str, message: str, status: str | None = None) -> None:
    """Move the job to ``secondary`` (and ``status``), closing the previous transition."""
    now = time.time()
    if record["transitions"] and record["transitions"][-1].get("EndTime") is None:
        record["transitions"][-1]["EndTime"] = now
    record["transitions"].append({"Status": secondary, "StartTime": now, "StatusMessage": message})
    record["secondary"] = secondary
    if status is not None:
        record["status"] = status
    if record["status"] in TERMINAL:
        record["transitions"][-1]["EndTime"] = now
        record["ended"] = record["ended"] or now
    record["modified"] = now


def fail(record: dict[str, Any], reason: str) -> None:
    record["failure_reason"] = reason[:FAILURE_REASON_MAX]
    set_secondary(record, "Failed", reason[:FAILURE_REASON_MAX], "Failed")


def billable_seconds(record: dict[str, Any]) -> int | None:
    if record["started"] is None:
        return None
    end = record["ended"] or time.time()
    return max(1, math.ceil(end - record["started"]))


def describe(record: dict[str, Any]) -> dict[str, Any]:
    """DescribeTrainingJob's response for ``record``."""
    req = record["request"]
    out: dict[str, Any] = {
        "TrainingJobName": req["TrainingJobName"], "TrainingJobArn": record["arn"],
        "ModelArtifacts": {"S3ModelArtifacts": record["model_artifacts"] or ""},
        "TrainingJobStatus": record["status"], "SecondaryStatus": record["secondary"],
        "HyperParameters": req.get("HyperParameters") or {}, "AlgorithmSpecification": req["AlgorithmSpecification"],
        "RoleArn": req.get("RoleArn", ""), "InputDataConfig": req.get("InputDataConfig") or [],
        "OutputDataConfig": req.get("OutputDataConfig") or {}, "ResourceConfig": req["ResourceConfig"],
        "StoppingCondition": req.get("StoppingCondition") or {}, "CreationTime": when(record["created"]),
        "LastModifiedTime": when(record["modified"]),
        "SecondaryStatusTransitions": [
            {k: (when(v) if k.endswith("Time") else v) for k, v in t.items()} for t in record["transitions"]],
        "Environment": req.get("Environment") or {},
        "ResponseMetadata": {"HTTPStatusCode": 200},
    }
    for key in ("VpcConfig", "CheckpointConfig", "EnableNetworkIsolation", "EnableManagedSpotTraining",
                "EnableInterContainerTrafficEncryption"):
        if key in req:
            out[key] = req[key]
    if record["failure_reason"]:
        out["FailureReason"] = record["failure_reason"]
    if record["started"] is not None:
        out["TrainingStartTime"] = when(record["started"])
        out["TrainingTimeInSeconds"] = out["BillableTimeInSeconds"] = billable_seconds(record)
    if record["ended"] is not None:
        out["TrainingEndTime"] = when(record["ended"])
    if not record["model_artifacts"]:
        del out["ModelArtifacts"]
    return out


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """One entry of ListTrainingJobs' ``TrainingJobSummaries``."""
    out = {"TrainingJobName": record["request"]["TrainingJobName"], "TrainingJobArn": record["arn"],
           "CreationTime": when(record["created"]), "LastModifiedTime": when(record["modified"]),
           "TrainingJobStatus": record["status"], "SecondaryStatus": record["secondary"]}
    if record["ended"] is not None:
        out["TrainingEndTime"] = when(record["ended"])
    return out
