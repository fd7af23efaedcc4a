"""A matrix step on the local backend: every combination runs as its own step, and the run ends with a table of
the combinations ranked by the metric they reported (issue 17, point 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration

# Node 0 reports eval_loss = 1 / nnodes: the 2-node combination is the better one.
SCRIPT = """
import json, os, time
if os.environ["PET_NODE_RANK"] == "0":
    with open(os.environ["MLRECIPE_METRICS_FILE"], "a") as fh:
        loss = 1 / int(os.environ["PET_NNODES"])
        fh.write(json.dumps({"time": time.time(), "metrics": {"eval_loss": loss}}) + "\\n")
"""

PIPELINE = """\
release: sweep
sweep: {{rank_by: eval_loss, goal: min}}
steps:
  - name: train
    chart: data-prep/data-process
    values:
      pvc: []
      process: {{command: [python3, {script}]}}
    matrix:
      resources.nnodes: [1, 2]
  - name: report
    chart: data-prep/data-process
    depends_on: train
    values:
      pvc: []
      process: {{command: ["true"]}}
"""


def test_a_sweep_runs_every_combination_and_ranks_them(mlhome: Path, tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(SCRIPT)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(script=tmp_path / "work.py"))
    run = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline)], capture_output=True, text=True,
                         env=cli_env(mlhome), timeout=180)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "step train-nnodes-1: succeeded" in out and "step train-nnodes-2: succeeded" in out
    assert out.index("step report (") > max(out.index("step train-nnodes-1: succeeded"),
                                            out.index("step train-nnodes-2: succeeded"))
    table = out[out.index("sweep train: best first by eval_loss (min)"):]
    assert table.index("train-nnodes-2") < table.index("train-nnodes-1"), table
    assert "0.5" in table and "resources.nnodes" in table
    status = subprocess.run([str(BIN / "mlrecipe"), "status", "sweep", "-o", "json"], capture_output=True, text=True,
                            env=cli_env(mlhome), timeout=60)
    steps = {s["name"]: s for s in json.loads(status.stdout)[0]["steps"]}
    assert steps["train-nnodes-2"]["matrix"] == {"resources.nnodes": 2}
    assert steps["train-nnodes-2"]["progress"]["metrics"] == {"eval_loss": 0.5}
    assert "matrix" not in steps["report"]
    again = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline), "-o", "json"], capture_output=True,
                           text=True, env=cli_env(mlhome), timeout=180)  # skipped: unchanged, still ranked
    assert again.returncode == 0, again.stdout + again.stderr
    (sweep,) = json.loads(again.stdout)["sweeps"]
    assert (sweep["step"], sweep["rank_by"], sweep["goal"]) == ("train", "eval_loss", "min")
    assert [(r["rank"], r["step"], r["matrix"], r["metrics"]) for r in sweep["rows"]] == [
        (1, "train-nnodes-2", {"resources.nnodes": 2}, {"eval_loss": 0.5}),
        (2, "train-nnodes-1", {"resources.nnodes": 1}, {"eval_loss": 1.0})]
    pipeline.write_text(PIPELINE.format(script=tmp_path / "work.py").replace("rank_by: eval_loss", "rank_by: eval_los"))
    typo = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline)], capture_output=True, text=True,
                          env=cli_env(mlhome), timeout=180)  # the steps are unchanged: skipped, then the table
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert (f"error: {pipeline}:2: sweep.rank_by: unknown metric 'eval_los': no combination of step train reported "
            "it (they reported eval_loss)") in typo.stderr
