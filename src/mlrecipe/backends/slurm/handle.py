"""The handle of a Slurm step: its job, the jobs chained after it, and the cluster they went to."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mlrecipe.backends.base import StepHandle
from mlrecipe.backends.slurm.transport import SshTarget


class SlurmServer(BaseModel):
    """Where a serving step's job listens (published by its batch script)."""

    url: str


class SlurmHandle(StepHandle):
    """``slurm_conf`` is the cluster's config file the job was submitted with (``None``: the client's default);
    ``ssh`` the login node it was submitted on (``None``: this machine) and ``remote_dir`` the step's directory
    there, so that status, logs, resume and uninstall from another process reach the same cluster."""

    job_id: str
    chain: list[str] = Field(default_factory=list, description="Jobs queued after this one (chain mode)")
    slurm_conf: str | None = None
    server: SlurmServer | None = None
    ssh: SshTarget | None = None
    remote_dir: str | None = None

    @property
    def job_ids(self) -> list[str]:
        """The step's job and, in chain mode, the jobs queued after it."""
        return [self.job_id, *self.chain]
