"""Framework scripts on Kubernetes: the training charts ship the nested ``scripts/<framework>/`` tree as a flat
ConfigMap and rebuild it, writable, at /etc/framework-scripts in every pod; serving charts mount it read-only.

The init container's own shell script is run here against a directory laid out as the kubelet lays out a
ConfigMap volume (``..data`` links, one link per key), and the tree it writes must equal the chart's.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests

FLAT = "/tmp/framework-scripts-flat"
TREE = "/etc/framework-scripts"


def _render(chart: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    objs = render_chart(chart_path(chart), {"image": "img", **values}, "r", "ns")
    assert validate_manifests(objs) == []
    return objs


def _pods(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Role -> pod spec of every pod template in the rendered objects."""
    pods: dict[str, dict[str, Any]] = {}
    for obj in objs:
        spec = obj.get("spec", {})
        for role, replica in spec.get("pytorchReplicaSpecs", {}).items():
            pods[role] = replica["template"]["spec"]
        cluster = spec.get("rayClusterSpec")
        if cluster:
            pods["head"] = cluster["headGroupSpec"]["template"]["spec"]
            for group in cluster["workerGroupSpecs"]:
                pods[group["groupName"]] = group["template"]["spec"]
        if "submitterPodTemplate" in spec:
            pods["submitter"] = spec["submitterPodTemplate"]["spec"]
    return pods


def _scripts_config_map(objs: list[dict[str, Any]]) -> dict[str, str]:
    return next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("framework-"))["data"]


def _shipped(chart: str, framework: str) -> dict[str, Path]:
    root = chart_path(chart) / "scripts" / framework
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _kubelet_volume(directory: Path, data: dict[str, str]) -> None:
    """A ConfigMap volume as the kubelet writes it: keys are links into a timestamped ``..data`` directory."""
    stamped = directory / "..2026_11_24_00_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, text in data.items():
        (stamped / key).write_text(text, encoding="utf-8")
    os.symlink(stamped.name, directory / "..data")
    for key in data:
        os.symlink(f"..data/{key}", directory / key)


def _run_init(init: dict[str, Any], data: dict[str, str], tmp_path: Path) -> Path:
    flat, tree = tmp_path / "flat", tmp_path / "tree"
    _kubelet_volume(flat, data)
    tree.mkdir()
    command = [*init["command"]]
    command[-1] = command[-1].replace(FLAT, str(flat)).replace(TREE, str(tree))
    subprocess.run(command, check=True, timeout=60)
    return tree


@pytest.mark.parametrize(("chart", "framework", "roles"), [
    ("training/pytorchjob-distributed", "accelerate", {"Master", "Worker"}),
    ("training/raytrain", "ray_train", {"head", "training", "submitter"}),
])
def test_training_charts_rebuild_the_nested_tree_writable_in_every_pod(
        chart: str, framework: str, roles: set[str], tmp_path: Path) -> None:
    shipped = _shipped(chart, framework)
    if not shipped:
        pytest.fail(f"chart {chart} ships no scripts/{framework}/")
    assert any("/" in rel for rel in shipped), "the framework tree is expected to be nested"
    objs = _render(chart, {"framework": framework, "resources": {"nnodes": 2}})
    data = _scripts_config_map(objs)
    assert sorted(data) == sorted(rel.replace("/", "--") for rel in shipped)
    pods = _pods(objs)
    assert roles <= set(pods)
    for role in roles:
        pod = pods[role]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["framework-scripts"] == {"name": "framework-scripts", "emptyDir": {}}
        assert "configMap" in volumes["framework-scripts-flat"]
        (init,) = [c for c in pod["initContainers"] if c["name"] == "init-framework-scripts"]
        assert init["image"] == "img"
        main = pod["containers"][0]
        (mount,) = [m for m in main["volumeMounts"] if m["mountPath"] == TREE]
        assert mount["name"] == "framework-scripts" and not mount.get("readOnly"), role
    tree = _run_init(init, data, tmp_path)
    rebuilt = {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()}
    assert rebuilt == set(shipped)
    for rel, source in shipped.items():
        assert filecmp.cmp(tree / rel, source, shallow=False), rel
        assert not (tree / rel).is_symlink()
    assert os.access(tree / next(iter(shipped)), os.W_OK)


def test_a_framework_the_chart_does_not_ship_renders_no_scripts() -> None:
    objs = _render("training/pytorchjob-distributed", {"framework": "no-such-framework"})
    assert not [o for o in objs if o["metadata"]["name"].startswith("framework-")]
    for pod in _pods(objs).values():
        assert "initContainers" not in pod
        assert all(m["mountPath"] != TREE for m in pod["containers"][0]["volumeMounts"])


def test_no_framework_no_init_container() -> None:
    pods = _pods(_render("training/pytorchjob-distributed", {"resources": {"nnodes": 2}}))
    assert all("initContainers" not in pod for pod in pods.values())
