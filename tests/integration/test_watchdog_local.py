"""The watchdog on the local backend, for real: two nodes in a gloo group, one stuck before an all-reduce.

Each test runs the CLI on a two-node (or one-node) data-process step; the step runtime of every node watches its
node's output, the metrics file and the other node's activity (docs/operating.md).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli, python, release_processes, state

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HANG = Path(__file__).resolve().parent / "assets" / "gloo_hang.py"
#: Long enough for a silent ``import torch`` on two busy cores, far below the gloo timeout (30 min).
TIMEOUT_S = 10


def gloo_recipe(directory: Path, watchdog: str, env: str = "") -> Path:
    path = directory / "gloo.yaml"
    path.write_text(textwrap.dedent(f"""
        resources: {{nnodes: 2}}
        watchdog: {watchdog}
        process:
          env: [{{name: OMP_NUM_THREADS, value: "1"}}{env}]
          command: [env, RANK=$PET_NODE_RANK, {python()}, {HANG}]
        """))
    return path


def step_dir(home: Path, release: str) -> Path:
    return home / "releases" / "local" / "default" / release / "steps" / "data-process"


def test_hang_is_found_with_every_node_stacks_and_the_stuck_rank_named(tmp_path: Path, mlhome: Path) -> None:
    recipe = gloo_recipe(tmp_path, f"{{hang_timeout: {TIMEOUT_S}s}}")
    result = cli(mlhome, "install", "hang", "data-prep/data-process", "-f", str(recipe), timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"hang: no progress for {TIMEOUT_S}s; stacks in " in out
    assert re.search(r"rank 1 \(node 1, pid \d+\) is not in a collective: in stuck_before_allreduce", out), out
    record = state(mlhome, "hang")
    assert record["state"] == "failed"
    marker = json.loads((step_dir(mlhome, "hang") / "watchdog" / "hang.json").read_text())
    stacks = step_dir(mlhome, "hang") / marker["dir"]
    files = sorted(p.name for p in stacks.glob("node-*-pid-*.txt"))
    assert [f.split("-pid-")[0] for f in files] == ["node-0", "node-1"], files
    node0 = next(stacks.glob("node-0-pid-*.txt")).read_text()
    node1 = next(stacks.glob("node-1-pid-*.txt")).read_text()
    assert "in all_reduce" in node0 and "torch/distributed" in node0
    assert "in stuck_before_allreduce" in node1
    joined = [float(m) for m in re.findall(r"rank 1 joined at ([0-9.]+)", (step_dir(mlhome, "hang") / "node-1.log")
                                            .read_text())]
    assert joined and marker["time"] - joined[-1] <= TIMEOUT_S + 15, "the hang was found too late"
    assert not release_processes("hang", mlhome)


def test_restart_after_a_hang_on_the_first_attempt_only(tmp_path: Path, mlhome: Path) -> None:
    once = tmp_path / "hung-once"
    recipe = gloo_recipe(tmp_path, f"{{hang_timeout: {TIMEOUT_S}s, on_hang: restart, max_restarts: 1}}",
                         f', {{name: HANG_ONCE, value: "{once}"}}')
    result = cli(mlhome, "install", "again", "data-prep/data-process", "-f", str(recipe), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert once.exists()
    assert state(mlhome, "again")["state"] == "succeeded"
    for rank in (0, 1):
        log = (step_dir(mlhome, "again") / f"node-{rank}.log").read_text()
        assert log.count("watchdog: restarting the command after a hang (restart 1 of 1)") == 1, log
        assert "in stuck_before_allreduce" in log and f"rank {rank} sum=2" in log
    assert not release_processes("again", mlhome)


def test_progress_without_output_and_short_silence_are_not_hangs(tmp_path: Path, mlhome: Path) -> None:
    """Two nodes print nothing for three timeouts while node 0 writes a progress line a second; then one node is
    silent twice for less than the timeout (4 s of silence in all, above the 3 s timeout)."""
    script = tmp_path / "quiet.py"
    script.write_text(textwrap.dedent("""
        import json, os, time
        if os.environ["PET_NODE_RANK"] == "0":
            for step in range(9):
                with open(os.environ["MLRECIPE_METRICS_FILE"], "a") as fh:
                    fh.write(json.dumps({"time": time.time(), "step": step}) + "\\n")
                time.sleep(1)
        else:
            time.sleep(9)
        """))
    recipe = tmp_path / "quiet.yaml"
    recipe.write_text(textwrap.dedent(f"""
        resources: {{nnodes: 2}}
        watchdog: {{hang_timeout: 3s}}
        process: {{command: [{python()}, {script}]}}
        """))
    result = cli(mlhome, "install", "quiet", "data-prep/data-process", "-f", str(recipe), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (step_dir(mlhome, "quiet") / "watchdog" / "hang.json").exists()

    pauses = tmp_path / "pauses.yaml"
    pauses.write_text(textwrap.dedent("""
        watchdog: {hang_timeout: 3s}
        process: {command: ['echo one; sleep 2; echo two; sleep 2; echo three']}
        """))
    result = cli(mlhome, "install", "pauses", "data-prep/data-process", "-f", str(pauses), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (step_dir(mlhome, "pauses") / "watchdog" / "hang.json").exists()
