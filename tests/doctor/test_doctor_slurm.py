"""Slurm doctor: parsers tested on recorded outputs, and a real run against whatever Slurm this
machine has (skipped when scontrol is not on PATH).

fixtures/slurm/: scontrol_ping_up.txt, scontrol_ping_down.txt, sinfo_two_nodes_gpu.txt and
sinfo_one_drained.txt were recorded from a real Slurm 22.05 cluster (two slurmd on one machine,
gpu GRES declared on placeholder device files); sinfo_p4d_cluster.txt is written in the same format
to cover cloud-node states (idle~, down*, drained) and GRES socket suffixes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mlrecipe.infra.doctor import exit_code, run_checks
from mlrecipe.infra.doctor import slurm as slurm_checks
from mlrecipe.infra.doctor.requirements import GPU, Requirements
from mlrecipe.infra.doctor.slurm import parse_gres_gpus, parse_scontrol_ping, parse_sinfo, partition_summary

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_parse_scontrol_ping() -> None:
    up, detail = parse_scontrol_ping(recorded("scontrol_ping_up.txt"))
    assert up and detail.endswith("is UP")
    down, detail = parse_scontrol_ping(recorded("scontrol_ping_down.txt"))
    assert not down and "DOWN" in detail
    assert parse_scontrol_ping("Slurmctld(primary) at a is DOWN\nSlurmctld(backup) at b is UP\n")[0]
    assert parse_scontrol_ping("")[0] is False


@pytest.mark.parametrize(
    ("gres", "count"),
    [
        ("gpu:a10g:2", 2),
        ("gpu:8", 8),
        ("gpu:a100:8(S:0-1)", 8),
        ("gpu:a100:4(S:0,1),gpu:t4:2", 6),
        ("(null)", 0),
        ("shard:4,gpu:h100:8(IDX:0-7)", 8),
        ("", 0),
    ],
)
def test_parse_gres_gpus(gres: str, count: int) -> None:
    assert parse_gres_gpus(gres) == count


def test_parse_recorded_sinfo() -> None:
    nodes = parse_sinfo(recorded("sinfo_two_nodes_gpu.txt"))
    assert [(n.name, n.partition, n.default, n.state, n.cpus, n.gpus) for n in nodes] == [
        ("n1", "debug", True, "idle", 2, 2),
        ("n2", "debug", True, "idle", 2, 2),
        ("n2", "gpu", False, "idle", 2, 2),
    ]
    parts = partition_summary(parse_sinfo(recorded("sinfo_one_drained.txt")))
    assert [n.name for n in parts["debug"]] == ["n2"]


def test_cloud_node_states() -> None:
    parts = partition_summary(parse_sinfo(recorded("sinfo_p4d_cluster.txt")))
    assert sorted(n.name for n in parts["gpu"]) == ["p4d-dy-p4d-3", "p4d-st-p4d-1", "p4d-st-p4d-2"]
    assert [n.name for n in parts["cpu"]] == ["c5-dy-c5-1"]
    assert parts["debug"] == []


def fake_commands(monkeypatch: pytest.MonkeyPatch, ping: str, sinfo: str) -> None:
    outputs = {"ping": ping, "sinfo": sinfo}

    def run_command(argv: list[str], timeout: float = 15.0) -> slurm_checks.CommandResult:
        key = "ping" if argv[:2] == ["scontrol", "ping"] else "sinfo"
        text = recorded(outputs[key])
        return slurm_checks.CommandResult(0 if "DOWN" not in text else 1, text, "")

    monkeypatch.setattr(slurm_checks, "run_command", run_command)
    monkeypatch.setattr(slurm_checks.shutil, "which", lambda name: f"/usr/bin/{name}")


def outcomes_for(req: Requirements) -> dict[str, object]:
    outcomes = run_checks(slurm_checks.checks(req))
    return {"code": exit_code(outcomes), **{o.check.name: o for o in outcomes}}


def test_checks_on_recorded_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_commands(monkeypatch, "scontrol_ping_up.txt", "sinfo_p4d_cluster.txt")
    req = Requirements(source=Path("r.yaml"), resources={GPU: 8}, nnodes=2)
    result = outcomes_for(req)
    assert result["code"] == 0
    assert "gpu fit 2 node(s) x 8 GPU(s)" in result["GPUs per node"].result.detail
    req.nnodes = 4
    result = outcomes_for(req)
    assert result["code"] == 1
    assert result["partitions"].status == "FAIL" and "needs 4 nodes" in result["partitions"].result.detail
    assert result["GPUs per node"].status == "FAIL"


def test_controller_down_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_commands(monkeypatch, "scontrol_ping_down.txt", "sinfo_two_nodes_gpu.txt")
    result = outcomes_for(Requirements())
    assert result["code"] == 1
    assert result["controller reachable"].status == "FAIL"
    assert "slurmctld" in result["controller reachable"].result.fix_hint


def test_missing_slurm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_checks.shutil, "which", lambda name: None)
    result = outcomes_for(Requirements())
    assert result["code"] == 1
    assert result["slurm client tools"].status == "FAIL"
    assert "apt-get install slurm-wlm" in result["slurm client tools"].result.fix_hint
    assert result["partitions"].status == "skip"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm client tools (scontrol) are not installed here")
def test_real_slurm_verdict_matches_scontrol_ping() -> None:
    """Runs the real commands: doctor's verdict on the controller must agree with `scontrol ping`."""
    truth = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30, check=False)
    up = "is UP" in truth.stdout
    result = outcomes_for(Requirements())
    assert result["slurm client tools"].result.ok
    assert result["controller reachable"].result.ok is up
    if up:
        real = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30, check=True)
        for partition in real.stdout.split():
            assert partition.rstrip("*") in result["partitions"].result.detail
    else:
        assert result["code"] == 1
