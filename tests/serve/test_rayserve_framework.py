"""The rayserve chart's ``openai_api.py`` (``framework: vllm-<version>``) on the local backend, reference style.

A reference-style recipe: ``import_path: openai_api:deployment`` with ``PYTHONPATH=/etc/framework-scripts`` and
``ENGINE_CONFIG`` in the application's ``runtime_env``, the ``VLLMDeployment`` override block, ``engine.config``
holding vLLM's engine arguments, a tiny model built here. Real Ray Serve, real vLLM (CPU build), the official
``openai`` client; an engine argument vLLM does not know stops the install with a message that names it.

Every ``framework`` of ``FRAMEWORKS`` plans its own ``scripts/<framework>`` folder; the live run is made once per
distinct ``openai_api.py`` (the version folders are copies of one source, tests/charts/test_rayserve_scripts.py, and
the same vLLM serves them all): the same bytes run the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest

from tests.integration.helpers import release_processes
from tests.repo import REPO
from tests.serve.serving import FRAMEWORKS, RAY_IMAGE, SERVE_ENV, framework_recipe, has_serve_env, run_cli, write

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not has_serve_env("ray, vllm"),
                       reason=f"no serving environment with Ray Serve and vLLM at {SERVE_ENV} (run 'make serve-env')"),
]

#: The serving environment runs the Ray image.
ENV = {"MLRECIPE_IMAGES": f"{RAY_IMAGE}={SERVE_ENV}"}
SCRIPTS = REPO / "charts" / "machine-learning" / "serving" / "rayserve" / "scripts"


def distinct_scripts(frameworks: list[str]) -> list[str]:
    """The first of ``frameworks`` for each distinct ``openai_api.py`` content, in order."""
    first: dict[bytes, str] = {}
    for framework in frameworks:
        first.setdefault((SCRIPTS / framework / "openai_api.py").read_bytes(), framework)
    return list(first.values())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_framework_plans_its_own_script_folder(framework: str, tiny_model: Path, tmp_path: Path) -> None:
    recipe = write(tmp_path / "rayserve.yaml", framework_recipe(tiny_model, framework))
    dry = run_cli(tmp_path / "mlhome", "install", "rs", "serving/rayserve", "-f", str(recipe), "--dry-run", env=ENV)
    assert dry.returncode == 0, dry.stderr
    assert f"scripts/{framework}" in dry.stdout and "/etc/framework-scripts" in dry.stdout


@pytest.mark.parametrize("framework", distinct_scripts(FRAMEWORKS))
def test_framework_openai_api_answers_the_openai_client(framework: str, tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    recipe = write(tmp_path / "rayserve.yaml", framework_recipe(tiny_model, framework))
    try:
        result = run_cli(home, "install", "rs", "serving/rayserve", "-f", str(recipe), env=ENV, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        state = json.loads((home / "releases" / "local" / "default" / "rs" / "state.json").read_text())
        client = openai.OpenAI(base_url=state["steps"]["rayserve"]["url"] + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["tiny"]

        out = client.completions.create(model="tiny", prompt="The list", max_tokens=8, temperature=0,
                                        extra_body={"ignore_eos": True})
        assert out.usage.completion_tokens == 8 and out.choices[0].text
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                              max_tokens=5, extra_body={"ignore_eos": True})
        assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 5
        pieces = [c.choices[0].text for c in client.completions.create(
            model="tiny", prompt="a", max_tokens=6, stream=True, extra_body={"ignore_eos": True})]
        assert len(pieces) >= 2 and "".join(pieces)
        deltas = [c.choices[0].delta.content for c in client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True,
            extra_body={"ignore_eos": True}) if c.choices]
        assert len([d for d in deltas if d]) >= 2

        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="tiny", prompt="a", max_tokens=-1)
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="no-such-model", prompt="a", max_tokens=2)
        logs = run_cli(home, "logs", "rs").stdout
        assert "openai_api (/etc/framework-scripts/openai_api.py): vLLM " in logs, logs[-3000:]
    finally:
        down = run_cli(home, "uninstall", "rs")
    assert down.returncode == 0, down.stdout + down.stderr
    assert release_processes("rs", home) == []


def test_unknown_engine_argument_stops_the_install_naming_it(tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    recipe = write(tmp_path / "rayserve.yaml", framework_recipe(tiny_model, FRAMEWORKS[-1], max_num_seq=4))
    try:
        result = run_cli(home, "install", "rs", "serving/rayserve", "-f", str(recipe), env=ENV, timeout=600)
        shown = result.stdout + result.stderr + run_cli(home, "logs", "rs").stdout
    finally:
        run_cli(home, "uninstall", "rs")
    assert result.returncode != 0, shown
    assert "not an engine argument of vLLM" in shown and "max_num_seq (did you mean max_num_seqs?)" in shown, shown
    assert release_processes("rs", home) == []


IMPORT_WITHOUT_MLRECIPE = """
import importlib.util, os, sys
sys.modules["mlrecipe"] = None  # as on an image without mlrecipe: importing it raises ImportError
for config in sys.argv[2:]:  # a fresh module for each ENGINE_CONFIG (vLLM and Ray Serve are imported once)
    os.environ["ENGINE_CONFIG"] = config
    spec = importlib.util.spec_from_file_location("openai_api", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ValueError as exc:
        print("REJECTED", exc)
    else:
        app = object()
        print("GATEWAY", module.with_gateway(app) is not app, type(module.deployment).__name__)
"""

#: Engine arguments and how the chart script takes them.
IMPORTS = [({}, "GATEWAY False Application"), ({"enable_prefix_caching": "no"}, "REJECTED ENGINE_CONFIG=")]


def test_the_chart_script_imports_without_mlrecipe(tmp_path: Path) -> None:
    script = REPO / "charts" / "machine-learning" / "serving" / "rayserve" / "scripts" / FRAMEWORKS[0] / "openai_api.py"
    configs = []
    for n, (engine, _) in enumerate(IMPORTS):
        configs.append(tmp_path / f"engine-config-{n}.json")
        configs[-1].write_text(json.dumps({"served_model_name": "tiny", "model": str(tmp_path), **engine}))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([str(SERVE_ENV / "bin" / "python"), "-c", IMPORT_WITHOUT_MLRECIPE, str(script),
                          *map(str, configs)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    outcomes = [line for line in out.stdout.splitlines() if line.startswith(("GATEWAY", "REJECTED"))]
    assert len(outcomes) == len(IMPORTS), out.stdout
    for line, (_, expected) in zip(outcomes, IMPORTS, strict=True):
        assert line.startswith(expected), out.stdout
