"""The fabric check for real: two local nodes in a gloo group measure an all-reduce before the command.

(Slurm: tests/slurm/test_fabric_check_slurm.py.) A ``min_ratio`` no CPU can meet fails the step before its command
with the fix in the reason.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli, release_processes, state

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def recipe(directory: Path, check: str, marker: Path) -> Path:
    path = directory / "fabric.yaml"
    path.write_text(textwrap.dedent(f"""
        resources: {{nnodes: 2, node_type: p5.48xlarge}}
        network_check: {check}
        process:
          env: [{{name: OMP_NUM_THREADS, value: "1"}}]
          command: [touch, '{marker}-$PET_NODE_RANK']
        """))
    return path


def step_dir(home: Path, release: str) -> Path:
    return home / "releases" / "local" / "default" / release / "steps" / "data-process"


def test_two_local_nodes_measure_a_positive_bus_bandwidth(tmp_path: Path, mlhome: Path) -> None:
    marker = tmp_path / "ran"
    result = cli(mlhome, "install", "fab", "data-prep/data-process", "-f", str(recipe(tmp_path, "true", marker)),
                 timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for rank in (0, 1):
        figures = json.loads((step_dir(mlhome, "fab") / f"fabric-node-{rank}.json").read_text())
        assert figures["backend"] == "gloo" and figures["transport"] == "gloo" and figures["nnodes"] == 2
        assert [row["bytes"] for row in figures["sizes"]] == [1 << 20, 8 << 20, 64 << 20]
        assert all(row["busbw_gbs"] > 0 and row["seconds"] > 0 for row in figures["sizes"])
        assert figures["baseline_gbps"] == 3200.0 and figures["ratio"] > 0
        assert Path(f"{marker}-{rank}").exists()
    status = cli(mlhome, "status", "fab", "-o", "json")
    assert status.returncode == 0, status.stderr
    steps = json.loads(status.stdout)[0]["steps"]
    assert [f["node"] for f in steps[0]["fabric"]] == [0, 1] and steps[0]["fabric"][0]["busbw_gbs"] > 0
    table = cli(mlhome, "status", "fab")
    assert "[fabric gloo busbw " in table.stdout and "of p5.48xlarge]" in table.stdout, table.stdout
    assert not release_processes("fab", mlhome)


def test_min_ratio_out_of_reach_fails_the_step_before_its_command_with_the_fix(tmp_path: Path,
                                                                               mlhome: Path) -> None:
    marker = tmp_path / "ran"
    result = cli(mlhome, "install", "slow", "data-prep/data-process", "-f",
                 str(recipe(tmp_path, "{min_ratio: 10}", marker)), timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "fabric check: bus bandwidth" in out and "of p5.48xlarge's 3200 Gbit/s (min_ratio 10" in out, out
    assert "security group that allows all traffic within itself" in out and "FI_PROVIDER=efa" in out
    assert state(mlhome, "slow")["state"] == "failed"
    assert not any(Path(f"{marker}-{rank}").exists() for rank in (0, 1))
    assert not release_processes("slow", mlhome)
