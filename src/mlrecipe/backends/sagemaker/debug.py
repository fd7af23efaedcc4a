"""What SageMaker still holds of a step, for ``mlrecipe debug-bundle``: DescribeTrainingJob (its environment
masked) and every host's log stream; an endpoint step's DescribeEndpoint."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import DebugRecord
from mlrecipe.backends.sagemaker.client import call
from mlrecipe.backends.sagemaker.endpoint import describe_endpoint
from mlrecipe.backends.sagemaker.handle import EndpointHandle, TrainingJobHandle
from mlrecipe.backends.sagemaker.logs import fetch_stream, host_name
from mlrecipe.credentials import redact_env
from mlrecipe.errors import MlrecipeError


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def described_job(job: dict[str, Any]) -> dict[str, Any]:
    """A DescribeTrainingJob answer as the bundle keeps it: its environment masked, botocore's metadata left out."""
    shown = {k: v for k, v in job.items() if k != "ResponseMetadata"}
    if isinstance(shown.get("Environment"), dict):
        shown["Environment"] = redact_env({str(k): str(v) for k, v in shown["Environment"].items()})
    return shown


def _host_logs(job: dict[str, Any], read: Callable[[int], str]) -> list[DebugRecord]:
    """One record per host of the job: ``logs/algo-<N>.log``."""
    out = []
    for rank in range(int((job.get("ResourceConfig") or {}).get("InstanceCount") or 1)):
        name = f"logs/{host_name(rank)}.log"
        try:
            out.append(DebugRecord(name, read(rank)))
        except (MlrecipeError, OSError) as exc:
            out.append(DebugRecord(name, missing=f"the log of host {host_name(rank)}: {exc}"))
    return out


def endpoint_records(client: Any, handle: EndpointHandle) -> list[DebugRecord]:
    """``describe-endpoint.json`` of an endpoint step."""
    try:
        found = describe_endpoint(client, handle.endpoint_name)
    except MlrecipeError as exc:
        return [DebugRecord("describe-endpoint.json", missing=str(exc))]
    return [DebugRecord("describe-endpoint.json", _json(described_job(found))) if found is not None else
            DebugRecord("describe-endpoint.json", missing=f"endpoint {handle.endpoint_name} no longer exists")]


def training_records(client: Any, logs: Callable[[], Any], log_group: str,
                     handle: TrainingJobHandle) -> list[DebugRecord]:
    """``describe-training-job.json`` and ``logs/algo-<N>.log`` of a training step (mode local: the local mode's
    logs). ``logs`` makes the CloudWatch Logs client when first needed (mode aws)."""
    try:
        job = call(f"DescribeTrainingJob {handle.job_name}", client.describe_training_job,
                   TrainingJobName=handle.job_name)
    except MlrecipeError as exc:
        return [DebugRecord("describe-training-job.json", missing=str(exc))]
    out = [DebugRecord("describe-training-job.json", _json(described_job(job)))]
    if handle.mode == "local":
        return out + _host_logs(job, lambda rank: Path(client.log_path(handle.job_name, rank)).read_text(
            encoding="utf-8", errors="replace"))

    def from_cloudwatch(rank: int) -> str:
        with tempfile.TemporaryDirectory(prefix="mlrecipe-bundle-") as tmp:
            return fetch_stream(logs(), log_group, handle.job_name, rank, Path(tmp) / "log").read_text(
                encoding="utf-8", errors="replace")

    return out + _host_logs(job, from_cloudwatch)
