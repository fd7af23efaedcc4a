"""The fabric check on the real Slurm test cluster: both tasks of a 2-node job measure a gloo all-reduce before the
command, and ``status -o json`` shows every node's figures."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]


def test_fabric_figures_of_two_slurm_nodes(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "fabric.yaml"
    recipe.write_text(textwrap.dedent("""
        resources: {nnodes: 2}
        network_check: true
        process:
          env: [{name: OMP_NUM_THREADS, value: "1"}]
          command: [echo, node $PET_NODE_RANK ran]
        """))
    result = cli(mlhome, "install", "fab", "data-prep/data-process", "-f", str(recipe), "-b", "slurm", timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    step = json.loads(cli(mlhome, "status", "fab", "-o", "json").stdout)[0]["steps"][0]
    figures = step["fabric"]
    assert [f["node"] for f in figures] == [0, 1], figures
    for node in figures:
        assert node["transport"] == "gloo" and node["nnodes"] == 2
        assert len(node["sizes"]) == 3 and all(row["busbw_gbs"] > 0 for row in node["sizes"])
