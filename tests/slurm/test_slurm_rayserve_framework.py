"""On Slurm a reference-style ``serving/rayserve`` recipe loads the chart's ``openai_api.py`` from
/etc/framework-scripts (``framework: vllm-<version>``, ``PYTHONPATH`` in the Serve config) and answers the
``openai`` client; uninstall cancels the job and leaves no process."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.integration.helpers import cli, release_processes, wait_for
from tests.serve.serving import FRAMEWORKS, RAY_IMAGE, SERVE_ENV, framework_recipe, has_serve_env, write
from tests.slurm.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.usefixtures("slurm_cluster")]


def test_framework_openai_api_runs_as_a_slurm_job(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster,
                                                  tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not has_serve_env("ray, vllm"):
        pytest.skip(f"no serving environment with Ray Serve and vLLM at {SERVE_ENV} (run 'make serve-env')")
    monkeypatch.setenv("MLRECIPE_IMAGES", f"{RAY_IMAGE}={SERVE_ENV}")
    recipe = write(tmp_path / "rayserve.yaml", framework_recipe(tiny_model, FRAMEWORKS[0]))
    try:
        result = cli(mlhome, "install", "rs", "serving/rayserve", "-f", str(recipe), "-b", "slurm", timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        rec = json.loads((mlhome / "releases" / "slurm" / "default" / "rs" / "state.json").read_text())
        url = rec["steps"]["rayserve"]["url"]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=4, extra_body={"ignore_eos": True})
        assert chat.usage.completion_tokens == 4
        logs = cli(mlhome, "logs", "slurm://default/rs").stdout
        assert "openai_api (/etc/framework-scripts/openai_api.py): vLLM " in logs, logs[-3000:]
    finally:
        cli(mlhome, "uninstall", "slurm://default/rs")
    wait_for(lambda: release_processes("rs", mlhome) == [], 90, "no Ray, Serve or vLLM process left")
