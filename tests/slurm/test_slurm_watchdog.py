"""The watchdog on the real Slurm test cluster: the same step runtime in both tasks of a 2-node job finds rank 1
stuck before an all-reduce, takes both nodes' stacks into the step directory, and the step's reason says so."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli, python
from tests.repo import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]
HANG = REPO / "tests" / "integration" / "assets" / "gloo_hang.py"


def test_hang_on_two_slurm_nodes_names_the_stuck_rank(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "gloo.yaml"
    recipe.write_text(textwrap.dedent(f"""
        resources: {{nnodes: 2}}
        watchdog: {{hang_timeout: 10s}}
        process:
          env: [{{name: OMP_NUM_THREADS, value: "1"}}]
          command: [env, RANK=$PET_NODE_RANK, {python()}, {HANG}]
        """))
    result = cli(mlhome, "install", "hang", "data-prep/data-process", "-f", str(recipe), "-b", "slurm", timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    step = json.loads(cli(mlhome, "status", "hang", "-o", "json").stdout)[0]["steps"][0]
    assert step["exit_code"] == 124
    assert step["message"].startswith("hang: no progress for 10s; stacks in "), step["message"]
    assert re.search(r"rank 1 \(node 1, pid \d+\) is not in a collective: in stuck_before_allreduce",
                     step["message"]), step["message"]
    stacks = Path(step["message"].split("stacks in ", 1)[1].split(";", 1)[0])
    assert "in all_reduce" in next(stacks.glob("node-0-pid-*.txt")).read_text()
    assert "in stuck_before_allreduce" in next(stacks.glob("node-1-pid-*.txt")).read_text()
