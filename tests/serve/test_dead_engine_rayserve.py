"""The real thing: a ``serving/rayserve`` recipe whose tiny Llama has a head dimension of 16, which vLLM's CPU
attention refuses on the first request ("Unsupported CPU attention configuration: head_dim=16") and its engine dies.
Requests then get 503 with the engine's error (never 500 with ``'State' object has no attribute 'server'``), and
``mlrecipe status`` stops saying the server is up within seconds (it asks the application's own ``/health``, not
only Serve's proxy). Real Ray Serve and vLLM (CPU build)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.helpers import release_processes
from tests.serve.serving import RAY_IMAGE, SERVE_ENV, has_serve_env, rayserve_recipe, run_cli, write

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not has_serve_env("ray, vllm"),
                       reason=f"no serving environment with Ray Serve and vLLM at {SERVE_ENV} (run 'make serve-env')"),
]

NARROW_HEADS = """
import json, sys
from transformers import LlamaConfig, LlamaForCausalLM
source, out = sys.argv[1:]
config = json.load(open(source + "/config.json"))
config.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4, head_dim=16)
LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(out)
"""


def narrow_head_model(tiny_model: Path, out: Path) -> Path:
    """``tiny_model``'s tokenizer with an untrained Llama of 4 heads of 16 dimensions."""
    out.mkdir()
    for f in tiny_model.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin")) and f.name != "config.json":
            shutil.copy(f, out / f.name)
    subprocess.run([sys.executable, "-c", NARROW_HEADS, str(tiny_model), str(out)], check=True, capture_output=True)
    assert json.loads((out / "config.json").read_text())["head_dim"] == 16
    return out


def log_lines(log: Path) -> list[str]:
    """The step log's lines that say what happened to the application and its engine."""
    words = ("rayserve:", "head_dim", "EngineDead", "Error", "health")
    return [line[-300:] for line in log.read_text(errors="replace").splitlines() if any(w in line for w in words)]


def server_word(home: Path) -> dict:
    doc = run_cli(home, "status", "dead", "-o", "json")
    assert doc.returncode == 0, doc.stderr
    (step,) = json.loads(doc.stdout)[0]["steps"]
    return step


def test_a_dead_engine_answers_503_and_status_does_not_say_up(tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    log = home / "releases" / "local" / "default" / "dead" / "steps" / "rayserve" / "node-0.log"
    recipe = write(tmp_path / "rayserve.yaml", rayserve_recipe(narrow_head_model(tiny_model, tmp_path / "narrow")))
    env = {"MLRECIPE_IMAGES": f"{RAY_IMAGE}={SERVE_ENV}"}
    try:
        result = run_cli(home, "install", "dead", "serving/rayserve", "-f", str(recipe), env=env, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        url = server_word(home)["url"]
        deadline = time.monotonic() + 30  # ready means the application's /health answered: it runs
        while "application tiny: RUNNING" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(2)
        answers = []
        for _ in range(3):
            try:
                answer = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 2},
                                    timeout=90)
            except httpx.TimeoutException as exc:
                answers.append((None, repr(exc)))
                continue
            answers.append((answer.status_code, answer.text))
            if answer.status_code == 503:
                break
        status, body = answers[-1]
        assert status == 503, (answers, log_lines(log))
        assert "has no attribute 'server'" not in body
        error = json.loads(body)["error"]
        assert error["code"] == 503 and "EngineDeadError" in error["message"]
        deadline = time.monotonic() + 20  # the application's /health answers 503 at once (Serve's own check: ~30 s)
        step = server_word(home)
        while "EngineDeadError" not in step.get("server_reason", "") and time.monotonic() < deadline:
            time.sleep(1)
            step = server_word(home)
        assert step.get("server") in ("unhealthy", "gone"), (step, log_lines(log))
        assert "EngineDeadError" in step["server_reason"], step
        text = run_cli(home, "status", "dead").stdout
        assert "[server up]" not in text, text
    finally:
        if log.exists():
            shutil.copy(log, tmp_path / "node-0.log")
        down = run_cli(home, "uninstall", "dead")
    assert down.returncode == 0, down.stdout + down.stderr
    assert release_processes("dead", home) == []
