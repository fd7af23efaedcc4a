"""Framework scripts on Kubernetes: the training charts ship the nested ``scripts/<framework>/`` tree as a flat
ConfigMap and rebuild it, writable, at /etc/framework-scripts in every pod; serving charts mount it read-only.

The init container's own shell script is run here against a directory laid out as the kubelet lays out a
ConfigMap volume (``..data`` links, one link per key), and the tree it writes must equal the chart's. The training
trees themselves are generated from the package ``mlrecipe_scripts`` (``make scripts``) and must equal a fresh
generation.
"""

from __future__ import annotations

import ast
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests
from mlrecipe_scripts import generate
from mlrecipe_scripts.layout import TREES

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


@pytest.mark.integration
@pytest.mark.parametrize(("chart", "framework", "roles"), [
    ("training/pytorchjob-distributed", "accelerate", {"Master", "Worker"}),
    ("training/pytorchjob-distributed", "pytorch_lightning", {"Master", "Worker"}),
    ("training/pytorchjob-distributed", "nemo2", {"Master", "Worker"}),
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


def test_the_committed_trees_are_a_fresh_generation() -> None:
    assert generate.differences() == [], "the trees differ from the package mlrecipe_scripts: run make scripts"


@pytest.mark.parametrize("tree", TREES, ids=lambda t: t.framework)
def test_a_tree_is_real_files_with_an_entry_at_every_reference_path(tree: generate.Tree) -> None:
    root = generate.REPO / tree.folder
    assert not [p for p in root.rglob("*") if p.is_symlink()]
    for entry in tree.entries:
        text = (root / entry.path).read_text(encoding="utf-8")
        assert f"from {entry.module} import " in text and text.count("sys.path") == 2, entry.path  # doc + bootstrap


@pytest.mark.integration
def test_a_tree_runs_on_its_own_copy_of_the_package(tmp_path: Path) -> None:
    """Without site-packages (``-S``: neither mlrecipe nor src/ importable) an entry script runs on the tree alone."""
    (tree,) = [t for t in TREES if t.framework == "accelerate"]
    copy = tmp_path / "framework-scripts"
    shutil.copytree(generate.REPO / tree.folder, copy)
    entry = "multimodal/vision_language/adapters/registry.py"
    proc = subprocess.run([sys.executable, "-S", entry], cwd=copy, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "qwen-vl" in proc.stdout and "qwen3_vl" in proc.stdout
    shutil.rmtree(copy / "vendor")  # the copy is what runs: without it, nothing does
    proc = subprocess.run([sys.executable, "-S", entry], cwd=copy, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 1 and "No module named 'mlrecipe_scripts'" in proc.stderr, proc.stderr[-2000:]


TRITON = next(t for t in TREES if t.framework == "encoder_transformers")


def test_a_stale_triton_tree_is_found(tmp_path: Path) -> None:
    """The Triton models' tree is checked like the others: an edited, a missing and a stray file are each listed."""
    folder = tmp_path / TRITON.folder
    shutil.copytree(generate.REPO / TRITON.folder, folder)
    assert [p for p in generate.differences(tmp_path) if p.startswith(TRITON.folder)] == []
    with (folder / "encoder_base.py").open("a", encoding="utf-8") as handle:
        handle.write("# edited in the chart\n")
    (folder / "reranker.py").unlink()
    (folder / "stray.py").write_text("", encoding="utf-8")
    stale = [p.removeprefix(f"{TRITON.folder}/") for p in generate.differences(tmp_path) if p.startswith(TRITON.folder)]
    assert stale == ["encoder_base.py", "reranker.py", "stray.py"]


def test_the_triton_models_are_flat_files_that_import_only_each_other() -> None:
    """Triton imports ``<model>/1/model.py`` with only its version folder on ``sys.path``: a task file there needs
    nothing from the tree but ``encoder_base.py`` beside it."""
    shipped = _shipped(TRITON.chart, TRITON.framework)
    assert "encoder_base.py" in shipped and all("/" not in rel for rel in shipped)
    tasks = {"embeddings.py", "masked_lm.py", "reranker.py", "sequence_classification.py", "token_classification.py"}
    assert set(shipped) == tasks | {"encoder_base.py"}
    for rel, path in shipped.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        local = {node.module for node in imports
                 if node.level or (node.module or "").split(".")[0] in {"mlrecipe_scripts", "encoder_base"}}
        assert local == ({"encoder_base"} if rel in tasks else set()), rel
        classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        assert ("TritonPythonModel" in classes) == (rel in tasks), rel


def test_a_module_shipped_flat_may_not_import_the_package(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "base.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "models" / "task.py").write_text("from .base import X\n", encoding="utf-8")
    files = generate.flat_files("models", tmp_path)
    assert files["task.py"].decode().endswith("\nfrom base import X\n")
    (tmp_path / "models" / "other.py").write_text("from mlrecipe_scripts.core import script_core\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"other\.py: a module shipped flat imports only its siblings"):
        generate.flat_files("models", tmp_path)
