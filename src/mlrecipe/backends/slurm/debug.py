"""What Slurm still holds of a step's jobs, for ``mlrecipe debug-bundle``: ``scontrol show job -d`` of each job
(kept only ``MinJobAge`` seconds after it ends) and, when this machine has ``sacct`` and the cluster keeps
accounting, its accounting records (kept long after)."""

from __future__ import annotations

import shutil

from mlrecipe.backends.base import DebugRecord
from mlrecipe.backends.slurm import scontrol
from mlrecipe.backends.slurm.handle import SlurmHandle
from mlrecipe.errors import MlrecipeError

#: The accounting fields of ``sacct``: how each job and job step ended, where, and what it used.
SACCT_FIELDS = ("JobID,JobName,Partition,State,ExitCode,DerivedExitCode,Submit,Start,End,Elapsed,NNodes,NodeList,"
                "AllocTRES,MaxRSS,MaxRSSNode")


def _tool(name: str, argv: list[str], handle: SlurmHandle) -> DebugRecord:
    """The output of one Slurm client command as a record; a refusal (or no answer) is its ``missing``."""
    try:
        result = scontrol._run(argv, handle.slurm_conf, ssh=handle.ssh)
    except MlrecipeError as exc:
        return DebugRecord(name, missing=str(exc))
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
        return DebugRecord(name, missing=f"{' '.join(argv)}: {said}")
    return DebugRecord(name, f"$ {' '.join(argv)}\n{result.stdout}")


def debug_records(handle: SlurmHandle) -> list[DebugRecord]:
    """``scontrol-show-job-<id>.txt`` and ``sacct-<id>.txt`` of the step's job and of the jobs chained after it."""
    out = []
    for job_id in handle.job_ids:
        shown = _tool(f"scontrol-show-job-{job_id}.txt", ["scontrol", "show", "job", "-d", job_id],
                      handle)
        if shown.text is None and "Invalid job id" in shown.missing:
            shown = DebugRecord(shown.name, missing=f"Slurm no longer knows job {job_id}: it keeps an ended job "
                                "MinJobAge seconds (300 by default); sacct has it if the cluster keeps accounting")
        out.append(shown)
        if handle.ssh is None and shutil.which("sacct") is None:
            out.append(DebugRecord(f"sacct-{job_id}.txt", missing="sacct is not installed on this machine"))
            continue
        out.append(_tool(f"sacct-{job_id}.txt", ["sacct", "-j", job_id, "--parsable2", f"--format={SACCT_FIELDS}"],
                         handle))
    return out
