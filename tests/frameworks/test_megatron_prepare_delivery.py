"""``framework: megatron`` reaches ``/etc/framework-scripts`` in the MPI data-prep chart (launcher and workers) and
the PyTorchJob chart, as the generated tree, and ``data/prepare.py --help`` states the rank split rule."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.spec.catalog import lookup
from mlrecipe.spec.framework_scripts import framework_scripts
from tests.frameworks.megatron_data import PREPARE


def _pods(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pods = {}
    for obj in objs:
        for key in ("mpiReplicaSpecs", "pytorchReplicaSpecs"):
            for role, replica in obj.get("spec", {}).get(key, {}).items():
                pods[role] = replica["template"]["spec"]
    return pods


@pytest.mark.parametrize(("chart", "roles"), [("data-prep/mpijob-data-process", {"Launcher", "Worker"}),
                                              ("training/pytorchjob-distributed", {"Master", "Worker"})])
def test_the_megatron_tree_is_delivered_to_every_pod(chart: str, roles: set[str]) -> None:
    scripts = framework_scripts(lookup(chart), "megatron")
    assert scripts is not None and scripts.tree
    files = scripts.files()
    assert {"data/prepare.py", "data/sample_corpus.py"} <= set(files)
    for module in ("mlrecipe_scripts/megatron/data/prepare.py", "mlrecipe_scripts/core/script_core.py"):
        assert any(f.endswith(module) for f in files), module  # the tree's own copy of the package
    objs = render_chart(chart_path(chart), {"image": "img", "framework": "megatron", "resources": {"nnodes": 2}},
                        "r", "ns")
    (config,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("framework-")]
    assert sorted(config["data"]) == sorted(f.replace("/", "--") for f in files)
    pods = _pods(objs)
    assert roles <= set(pods)
    for role in roles:
        assert [c["name"] for c in pods[role]["initContainers"]] == ["init-framework-scripts"], role
        mounts = [m for m in pods[role]["containers"][0]["volumeMounts"] if m["mountPath"] == "/etc/framework-scripts"]
        assert mounts == [{"name": "framework-scripts", "mountPath": "/etc/framework-scripts"}], role


@pytest.mark.integration
def test_prepare_help_documents_the_rank_split() -> None:
    done = subprocess.run([sys.executable, str(PREPARE), "--help"], capture_output=True, text=True, timeout=60,
                          check=True)
    assert "--file-numbers" in done.stdout and "--rm-downloaded" in done.stdout
    assert "split contiguously" in done.stdout and "0-5 on 4 ranks: 0, 1-2, 3, 4-5" in done.stdout


@pytest.mark.integration
def test_a_bad_flag_value_exits_2_with_one_error_line(tmp_path: Any) -> None:
    done = subprocess.run([sys.executable, str(PREPARE), "--file-numbers", "3-1", "--data-dir", str(tmp_path),
                           "--stages", "extract"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("data/prepare.py: error: --file-numbers: '3-1'")
    assert not list(tmp_path.iterdir())
