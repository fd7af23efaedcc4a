"""The TrainJob that ``training_api: v2`` renders runs: the kubelet harness (``python -m tests.kubelet``) plays
Kubeflow Trainer v2.3.0 and JobSet on the ``torch-distributed`` runtime (:mod:`tests.kubelet.controllers.trainjob`)
and runs each node's container as processes here; the two nodes' torchrun meet over gloo through the torch plugin's
``PET_*`` and JobSet's pod DNS names, as the PyTorchJob rendering of the same recipe does through the training
operator's (``tests/kubelet_runs/test_kinds.py``)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubelet_runs.scenarios import RECIPES, run_harness
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration


def _render_v2(tmp_path: Path) -> list[dict[str, Any]]:
    chart, recipe = RECIPES["pytorchjob"]
    path = tmp_path / "pytorchjob.yaml"
    path.write_text(textwrap.dedent(recipe))
    out = subprocess.run([str(BIN / "mlrecipe"), "template", "kh", chart, "-f", str(path), "-b", "kubernetes",
                          "-B", "training_api=v2"], env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True,
                         timeout=120, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def test_trainjob_nodes_meet_through_the_torch_plugin_env(tmp_path: Path) -> None:
    objects = _render_v2(tmp_path)
    assert [o["kind"] for o in objects if o["kind"] in ("TrainJob", "PyTorchJob")] == ["TrainJob"]
    done = run_harness(tmp_path, objects, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: TrainJob/trainjob-kh: Complete (2/2 nodes succeeded)" in done.stdout
    for rank in (0, 1):
        found = sorted((tmp_path / "logs").glob(f"trainjob-kh-node-0-{rank}-*/node.log"))
        assert found, f"no log of node {rank}"
        text = "".join(p.read_text() for p in found)
        assert (f"DISTRIBUTED_ARGS=--nnodes 2 --nproc_per_node 1 --node_rank {rank} --master_addr "
                "trainjob-kh-node-0-0.trainjob-kh --master_port 29400") in text
        assert (f"rank {rank}/2 host trainjob-kh-node-0-{rank} master trainjob-kh-node-0-0.trainjob-kh:29400 "
                "sum 3.0") in text
