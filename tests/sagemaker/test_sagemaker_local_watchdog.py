"""The watchdog in SageMaker local mode: two hosts run the same step runtime; rank 1 stuck before an all-reduce is
found, and its reason becomes the training job's FailureReason (the runtime writes ``/opt/ml/output/failure``)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.repo import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HANG = REPO / "tests" / "integration" / "assets" / "gloo_hang.py"
PIPELINE = """
release: smhang
steps:
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {{nnodes: 2}}
      pvc: []
      watchdog: {{hang_timeout: 10s}}
      sagemaker:
        inputs: [{{name: code, uri: "file://{code}"}}]
      train:
        env: [{{name: OMP_NUM_THREADS, value: "1"}}]
        command: [env, RANK=$PET_NODE_RANK, python3, /opt/ml/input/data/code/gloo_hang.py]
"""


def test_hang_in_local_mode_is_the_jobs_failure_reason(tmp_path: Path, mlhome: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "gloo_hang.py").write_text(HANG.read_text())
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(code=code)))
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("sagemaker: {mode: local, poll_seconds: 0.3}\n")
    result = cli(mlhome, "run", str(pipeline), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    step = json.loads(cli(mlhome, "status", "smhang", "-o", "json").stdout)[0]["steps"][0]
    assert "hang: no progress for 10s; stacks in " in step["message"], step["message"]
    assert re.search(r"rank 1 \(node 1, pid \d+\) is not in a collective: in stuck_before_allreduce",
                     step["message"]), step["message"]
    host2 = cli(mlhome, "logs", "smhang", "train", "--rank", "1").stdout
    assert "in stuck_before_allreduce" in host2 or "hang: no progress" in host2
