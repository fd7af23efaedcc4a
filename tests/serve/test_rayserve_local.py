"""``serving/rayserve`` on the local backend: a real Ray instance, Ray Serve and vLLM, from a reference-style recipe.

The recipe is the reference's form (``ray.serve_config_v2.serveConfigV2`` with ``import_path:
openai_api:deployment`` and ``ENGINE_CONFIG`` pointing at ``/etc/engine-config/engine-config.json``,
``engine.config`` holding vLLM's engine arguments), unchanged but for a tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.helpers import release_processes, release_tree, still_alive
from tests.repo import REPO
from tests.serve.serving import RAY_IMAGE, SERVE_ENV, has_serve_env, rayserve_recipe, run_cli, write

pytestmark = pytest.mark.integration


def test_rayserve_recipe_serves_openai_api_and_uninstalls(tiny_model: Path, tmp_path: Path) -> None:
    if not has_serve_env("ray, vllm"):
        pytest.skip(f"no serving environment with Ray Serve and vLLM at {SERVE_ENV} (run 'make serve-env')")
    home = tmp_path / "mlhome"
    recipe = write(tmp_path / "rayserve.yaml", rayserve_recipe(tiny_model))
    # The README's set-up and no variable: the reference's Ray image runs in .venv-vllm, found beside .venv.
    default_env = SERVE_ENV == REPO / ".venv-vllm"
    env = {"MLRECIPE_IMAGES": "" if default_env else f"{RAY_IMAGE}={SERVE_ENV}"}
    dry = run_cli(home, "install", "rs", "serving/rayserve", "-f", str(recipe), "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"runs in the local environment {SERVE_ENV}" in dry.stdout
    assert "mlrecipe.serve.rayserve" in dry.stdout and "engine-config.json" in dry.stdout
    tree = set()
    try:
        result = run_cli(home, "install", "rs", "serving/rayserve", "-f", str(recipe), env=env, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        tree = release_tree("rs", home)
        state = json.loads((home / "releases" / "local" / "default" / "rs" / "state.json").read_text())
        url = state["steps"]["rayserve"]["url"]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        out = client.completions.create(model="tiny", prompt="The list", max_tokens=8, temperature=0,
                                        extra_body={"ignore_eos": True})
        assert out.usage.completion_tokens == 8 and out.choices[0].text
        pieces = [c.choices[0].text for c in client.completions.create(
            model="tiny", prompt="a", max_tokens=6, stream=True, extra_body={"ignore_eos": True})]
        assert len(pieces) >= 2 and "".join(pieces)
        v2 = httpx.post(url + "/v2/models/tiny/generate", json={"text_input": "a", "parameters": {"max_tokens": 3}})
        assert v2.status_code == 200 and v2.json()["text_output"]
        bad = httpx.post(url + "/v1/completions", json={"model": "nope", "prompt": "a"})
        assert bad.status_code == 404 and bad.json()["error"]["message"]
        logs = run_cli(home, "logs", "rs").stdout
        assert "mlrecipe.serve.rayserve: deploying tiny on http://127.0.0.1:" in logs
    finally:
        down = run_cli(home, "uninstall", "rs")
    assert down.returncode == 0, down.stdout + down.stderr
    assert release_processes("rs", home) == [], "Ray, Serve and vLLM processes are all gone"
    assert len(tree) > 3 and still_alive(tree) == [], "and so are those that renamed themselves"
