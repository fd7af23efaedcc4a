"""What Slurm still holds of a step goes into a debug bundle: ``scontrol show job -d`` and ``sacct`` of each of its
jobs, against recorded answers of the client tools (no process starts here; the cluster tests run the real ones)."""

from __future__ import annotations

import subprocess

import pytest

from mlrecipe.backends.base import CollectsDebugRecords
from mlrecipe.backends.registry import get_backend
from mlrecipe.backends.slurm import debug, scontrol
from mlrecipe.backends.slurm.handle import SlurmHandle
from mlrecipe.errors import TransientBackendError

SHOW_JOB = (
    "JobId=42 JobName=r-train\n   UserId=root(0) GroupId=root(0) MCS_label=N/A\n   JobState=FAILED "
    "Reason=NonZeroExitCode Dependency=(null)\n   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0\n"
    "   DerivedExitCode=0:0\n   RunTime=00:00:04 TimeLimit=UNLIMITED TimeMin=N/A\n   NodeList=n[1-2]\n"
    "     Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=\n   StdOut=/home/r/steps/train/batch.log\n")
SACCT = ("JobID|JobName|Partition|State|ExitCode|DerivedExitCode|Submit|Start|End|Elapsed|NNodes|NodeList|AllocTRES|"
         "MaxRSS|MaxRSSNode\n42|r-train|debug|FAILED|3:0|0:0|2026-11-26T09:00:00|2026-11-26T09:00:01|"
         "2026-11-26T09:00:05|00:00:04|2|n[1-2]|cpu=4,node=2||\n42.0|step_runtime|||FAILED|3:0||||||2|n[1-2]|||\n")


def _answers(table: dict[tuple[str, ...], tuple[int, str, str]], asked: list[list[str]]):
    def run(argv: list[str], slurm_conf: str | None, **options: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        if argv[0] == "sacct" and ("sacct",) in table:
            code, out, err = table[("sacct",)]
        else:
            code, out, err = table[tuple(argv[:3])]
        return subprocess.CompletedProcess(argv, code, out, err)
    return run


def test_slurm_declares_the_capability() -> None:
    assert issubclass(type(get_backend("slurm")), CollectsDebugRecords)


def test_scontrol_and_sacct_of_each_job(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    monkeypatch.setattr(scontrol, "_run", _answers({("scontrol", "show", "job"): (0, SHOW_JOB, ""),
                                                    ("sacct",): (0, SACCT, "")}, asked))
    monkeypatch.setattr(debug.shutil, "which", lambda name: f"/usr/bin/{name}")
    records = {r.name: r for r in get_backend("slurm").debug_records(SlurmHandle(job_id="42", slurm_conf="/c"))}
    assert list(records) == ["scontrol-show-job-42.txt", "sacct-42.txt"]
    assert "JobState=FAILED Reason=NonZeroExitCode" in (records["scontrol-show-job-42.txt"].text or "")
    assert (records["sacct-42.txt"].text or "").splitlines()[2].startswith("42|r-train|debug|FAILED|3:0")
    assert asked[0] == ["scontrol", "show", "job", "-d", "42"]
    assert asked[1][:3] == ["sacct", "-j", "42"] and "--parsable2" in asked[1]


def test_what_slurm_forgot_or_refuses_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    monkeypatch.setattr(scontrol, "_run", _answers({
        ("scontrol", "show", "job"): (1, "", "slurm_load_jobs error: Invalid job id specified"),
        ("sacct",): (1, "", "sacct: error: Slurm accounting storage is disabled")}, asked))
    monkeypatch.setattr(debug.shutil, "which", lambda name: f"/usr/bin/{name}")
    records = get_backend("slurm").debug_records(SlurmHandle(job_id="42", chain=["43"]))
    assert [r.name for r in records] == ["scontrol-show-job-42.txt", "sacct-42.txt", "scontrol-show-job-43.txt",
                                         "sacct-43.txt"], "the chained job's too"
    assert all(r.text is None for r in records)
    assert "Slurm no longer knows job 42" in records[0].missing and "MinJobAge" in records[0].missing
    assert "accounting storage is disabled" in records[1].missing

    monkeypatch.setattr(debug.shutil, "which", lambda name: None)

    def silent(argv: list[str], slurm_conf: str | None, **options: object) -> subprocess.CompletedProcess[str]:
        raise TransientBackendError("scontrol show job -d 42 did not answer in 30s")

    monkeypatch.setattr(scontrol, "_run", silent)
    shown, sacct = get_backend("slurm").debug_records(SlurmHandle(job_id="42"))
    assert shown.text is None and "did not answer" in shown.missing
    assert sacct.text is None and sacct.missing == "sacct is not installed on this machine"
