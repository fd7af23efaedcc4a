"""The handles of SageMaker steps: where the API that holds the step is, and what the step made there: a training
job (:class:`TrainingJobHandle`) or an endpoint with its model and config (:class:`EndpointHandle`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from mlrecipe.backends.base import StepHandle


class SageMakerHandle(StepHandle):
    """Where the step's API is: enough for another CLI process to reach it."""

    mode: Literal["aws", "local"] = "aws"
    region: str | None = None
    endpoint_url: str | None = None
    local_root: str | None = None
    adopted: bool = Field(False, description="It existed already (a re-run or resume) and was not created again")

    #: The path that handles the step (:data:`~.paths.TRAINING` or :data:`~.paths.ENDPOINT`).
    path: ClassVar[str] = ""


class TrainingJobHandle(SageMakerHandle):
    """A training step's job: describe it, stop it, read its hosts' logs."""

    job_name: str = Field(min_length=1)
    model_artifacts: str | None = Field(None, description="ModelArtifacts.S3ModelArtifacts once the job completed")

    path: ClassVar[str] = "training"


class EndpointHandle(SageMakerHandle):
    """An endpoint step's endpoint (its model and endpoint config have the same name): describe and delete them."""

    endpoint_name: str = Field(min_length=1)

    path: ClassVar[str] = "endpoint"


def load_handle(data: dict[str, Any]) -> TrainingJobHandle | EndpointHandle:
    """The typed handle of a step's JSON form (the release state, ``sagemaker-job.json``); an endpoint step's says
    ``endpoint_name`` (earlier versions also wrote an empty ``job_name`` beside it)."""
    if data.get("endpoint_name"):
        return EndpointHandle.model_validate(data)
    return TrainingJobHandle.model_validate(data)
