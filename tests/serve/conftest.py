"""Fixtures of the serving tests: a tiny trained model (``tests/serve/serving.py``), one vLLM release for the module."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.repo import EXAMPLES
from tests.serve.serving import SERVE_ENV, SERVE_IMAGE, Release, has_serve_env, run_cli, tiny_model, write

__all__ = ["tiny_model", "vllm_release"]


@pytest.fixture(scope="module")
def vllm_release(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """``mlrecipe install`` of a vLLM server (API key on, 4 requests in flight, 64 KiB bodies); uninstalled after."""
    if not has_serve_env():
        pytest.skip(f"no serving environment with vLLM at {SERVE_ENV} (run 'make serve-env')")
    root = tmp_path_factory.mktemp("vllm-release")
    home = root / "mlhome"
    recipe = write(root / "server.yaml", f"""
        image: {SERVE_IMAGE}
        server:
          command: [python3, -m, mlrecipe.serve]
          args:
            - --model {tiny_model}
            - --served-model-name tiny
            - --enforce-eager
            - --max-inflight 4
            - --max-body-bytes 65536
            - --chat-template {EXAMPLES / "quickstart" / "chat_template.jinja"}
          readiness_probe: {{path: /health, period_secs: 1}}
          startup_probe: {{path: /health, period_secs: 10, failure_threshold: 30}}
        """)
    key = "test-" + secrets.token_hex(12)
    try:
        result = run_cli(home, "install", "llm", "serving/generic-server", "-f", str(recipe),
                         env={"MLRECIPE_API_KEY": key}, timeout=400)
        assert result.returncode == 0, result.stdout + result.stderr
        state = json.loads((home / "releases" / "local" / "default" / "llm" / "state.json").read_text())
        url = state["steps"][state["order"][0]]["url"]
        yield Release(home, "llm", url, key, result.stdout + result.stderr)
    finally:
        run_cli(home, "uninstall", "llm")
