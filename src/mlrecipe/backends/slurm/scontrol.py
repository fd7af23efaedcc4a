"""Thin wrappers around the Slurm client tools: sbatch, scontrol show job, scancel (here, or on a login node over
SSH: :mod:`.transport`).

No accounting database is assumed: job state comes from ``scontrol show job`` (kept for
``MinJobAge`` seconds after the job ends).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mlrecipe.backends.base import StepState
from mlrecipe.backends.slurm.transport import SshTarget, transport_for
from mlrecipe.errors import SlurmError, TransientBackendError

#: Slurm's job states (``JobState``) as step states: queued or held, or between phases (pending); running; done.
#: A state not listed (a newer Slurm's) counts as failed.
SLURM_STATES: dict[str, StepState] = {
    **dict.fromkeys(("PENDING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
                     "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"), StepState.PENDING),
    "RUNNING": StepState.RUNNING,
    "COMPLETED": StepState.SUCCEEDED,
    **dict.fromkeys(("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                     "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"), StepState.FAILED),
}
#: Reasons that keep a queued job from ever running: it counts as failed.
NEVER_RUNS = frozenset({"DependencyNeverSatisfied"})
_FIELD = re.compile(r"(\w[\w/:]*)=(\S*)")


def _run(argv: list[str], slurm_conf: str | None, timeout: float = 30, env: dict[str, str] | None = None,
         ssh: SshTarget | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command here, or on the login node when ``ssh`` is given (:mod:`.transport`)."""
    return transport_for(ssh, slurm_conf).run(argv, timeout, env, prelude)


def sbatch(script: Path | str, extra: list[str] | None = None, slurm_conf: str | None = None,
           env: dict[str, str] | None = None, ssh: SshTarget | None = None, prelude: str = "") -> str:
    """Submit ``script``; return the job id. ``env`` joins the environment the job inherits (``--export=ALL``).
    Over ``ssh``, ``prelude`` (the staging of the job's files) runs first in the same round trip. An sbatch that did
    not answer is a :class:`SlurmError`, never transient: the runner would submit it again and queue it twice."""
    try:
        result = _run(["sbatch", "--parsable", *(extra or []), str(script)], slurm_conf, env=env, ssh=ssh,
                      prelude=prelude)
    except TransientBackendError as exc:
        raise SlurmError(f"{exc}: the job may have been queued all the same (look for it with squeue --me), "
                         "so it is not submitted again") from None
    if result.returncode != 0:
        raise SlurmError(f"sbatch failed: {(result.stderr or result.stdout).strip()}")
    return result.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobInfo:
    """What ``scontrol show job`` says of one job."""

    job_id: str
    state: str
    reason: str
    exit_code: int | None
    signal: int | None
    restarts: int
    nodes: str
    fields: dict[str, str]

    @property
    def step_state(self) -> StepState:
        """The job's state as a step's (:data:`SLURM_STATES`); a queued job that can never run has failed."""
        state = SLURM_STATES.get(self.state, StepState.FAILED)
        return StepState.FAILED if state.active and self.reason in NEVER_RUNS else state

    @property
    def active(self) -> bool:
        """Slurm still holds the job: queued or running."""
        return self.step_state.active


def parse_job(text: str) -> JobInfo | None:
    """Parse one line of ``scontrol show job -o``."""
    fields = dict(_FIELD.findall(text))
    if "JobId" not in fields:
        return None
    code: int | None = None
    sig: int | None = None
    if ":" in fields.get("ExitCode", ""):
        a, b = fields["ExitCode"].split(":", 1)
        code, sig = int(a), int(b)
    return JobInfo(
        job_id=fields["JobId"],
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", "None"),
        exit_code=code,
        signal=sig,
        restarts=int(fields.get("Restarts", "0") or 0),
        nodes=fields.get("NodeList", ""),
        fields=fields,
    )


def show_job(job_id: str, slurm_conf: str | None = None, ssh: SshTarget | None = None) -> JobInfo | None:
    """The job's state, or ``None`` when Slurm no longer knows it."""
    result = _run(["scontrol", "show", "job", "-o", job_id], slurm_conf, ssh=ssh)
    if result.returncode != 0:
        if "Invalid job id" in result.stderr:
            return None
        raise TransientBackendError(f"scontrol show job {job_id} failed: {result.stderr.strip()}")
    for line in result.stdout.splitlines():
        info = parse_job(line)
        if info is not None and info.job_id == job_id:
            return info
    return None


def scancel(job_ids: list[str], slurm_conf: str | None = None, ssh: SshTarget | None = None) -> None:
    """Cancel jobs (finished or unknown ones are fine)."""
    if not job_ids:
        return
    result = _run(["scancel", *job_ids], slurm_conf, ssh=ssh)
    if result.returncode != 0 and "Invalid job id" not in result.stderr:
        raise SlurmError(f"scancel {' '.join(job_ids)} failed: {result.stderr.strip()}")
