"""The handle of a SageMaker step: its training job (or endpoint) and where the API that holds it is."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import StepHandle


class SageMakerHandle(StepHandle):
    """Enough to describe, stop and read the logs of the step's job (or describe and delete its endpoint) from
    another CLI process."""

    job_name: str = ""
    endpoint_name: str | None = Field(None, description="An endpoint step's endpoint (and its model and config)")
    mode: Literal["aws", "local"] = "aws"
    region: str | None = None
    endpoint_url: str | None = None
    local_root: str | None = None
    adopted: bool = Field(False, description="The job existed already (a re-run or resume) and was not created again")
    model_artifacts: str | None = Field(None, description="ModelArtifacts.S3ModelArtifacts once the job completed")
