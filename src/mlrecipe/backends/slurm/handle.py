"""The handle of a Slurm step: its job, the jobs chained after it, and the cluster they went to."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mlrecipe.backends.base import StepHandle


class SlurmServer(BaseModel):
    """Where a serving step's job listens (published by its batch script)."""

    url: str


class SlurmHandle(StepHandle):
    """``slurm_conf`` is the cluster's config file the job was submitted with (``None``: the client's default)."""

    job_id: str
    chain: list[str] = Field(default_factory=list, description="Jobs queued after this one (chain mode)")
    slurm_conf: str | None = None
    server: SlurmServer | None = None

    @property
    def job_ids(self) -> list[str]:
        """The step's job and, in chain mode, the jobs queued after it."""
        return [self.job_id, *self.chain]
