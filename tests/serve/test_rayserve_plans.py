"""Plans of a reference-style ``serving/rayserve`` recipe with ``framework: vllm-<version>`` on the host backends:
the local and the Slurm step both get the chart's ``openai_api.py`` bound at /etc/framework-scripts, beside the
engine configuration at /etc/engine-config, and deploy the recipe's Serve config as written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.repo import REPO
from tests.serve.serving import FRAMEWORKS, framework_recipe

SCRIPTS = REPO / "charts" / "machine-learning" / "serving" / "rayserve" / "scripts"


@pytest.mark.parametrize("backend", ["local", "slurm"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_host_plans_bind_the_chart_script(backend: str, framework: str, mlhome: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    recipe = tmp_path / "rayserve.yaml"
    recipe.write_text(framework_recipe(tmp_path / "model", framework))
    inputs = {"kind": "install", "release": "rs", "chart": "serving/rayserve", "files": [str(recipe)], "sets": [],
              "namespace": "default"}
    options = {"master_port": 29500} if backend == "slurm" else {}
    plan = ReleaseRunner(spec_from_inputs(inputs), get_backend(backend, options), inputs, QuietDisplay()).materialize()
    assert f"framework scripts: 1 file(s) of {SCRIPTS / framework} copied to " in plan
    assert "/etc/framework-scripts" in plan.split(f"{SCRIPTS / framework} copied to ", 1)[1].splitlines()[0]
    assert "/etc/engine-config" in plan and "mlrecipe.serve.rayserve" in plan
    assert "import_path: openai_api:deployment" in plan and "PYTHONPATH: /etc/framework-scripts" in plan
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"


@pytest.mark.parametrize(("applications", "health"), [
    ("[{name: tiny, import_path: 'openai_api:deployment'}]", "/health"),
    ("[{name: a, import_path: 'mine:app'}, {name: b, route_prefix: /llm/, import_path: 'openai_api:deployment'}]",
     "/llm/health"),
    ("[{name: mine, import_path: 'mine:app'}]", "/-/healthz"),
])
def test_the_server_is_healthy_while_the_openai_application_is(applications: str, health: str, mlhome: Path,
                                                                tmp_path: Path) -> None:
    """The chart's OpenAI application answers 503 on its own /health as soon as its engine died; Serve's proxy
    answers /-/healthz for ~30 s more. Other applications have only the proxy's check."""
    recipe = tmp_path / "rayserve.yaml"
    recipe.write_text("image: python:3.11\nray:\n  serve_config_v2:\n    serveConfigV2: |\n"
                      f"      applications: {applications}\n")
    inputs = {"kind": "install", "release": "rs", "chart": "serving/rayserve", "files": [str(recipe)], "sets": [],
              "namespace": "default"}
    plan = ReleaseRunner(spec_from_inputs(inputs), get_backend("local", {"server_port": 18123}), inputs,
                         QuietDisplay()).materialize()
    assert f"ready when GET http://127.0.0.1:18123{health} answers 2xx" in plan, plan
