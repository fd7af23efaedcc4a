"""What the serving tests share: the serving environment, the CLI with it, a tiny trained model, servers, recipes.

The serving environment is ``$MLRECIPE_SERVE_ENV`` or ``<repo>/.venv-vllm`` (``make serve-env``); tests that need
it are skipped, saying so, when it is missing. The model (the fixture ``tiny_model``, which the serving and Slurm
conftests import) is the quickstart's own: its data script and a 20-step training run (a few seconds), exported in
Hugging Face format; nothing comes from a hub.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mlrecipe.ports import free_port
from tests.repo import BIN, EXAMPLES, REPO, cli_env, private_tmp, remove_private_tmp

SERVE_ENV = Path(os.environ.get("MLRECIPE_SERVE_ENV") or REPO / ".venv-vllm")
SERVE_IMAGE = "vllm/vllm-openai:latest"
SCRIPTS = EXAMPLES / "quickstart" / "scripts"


def serve_python() -> Path:
    return SERVE_ENV / "bin" / "python"


def has_serve_env(module: str = "vllm") -> bool:
    python = serve_python()
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", f"import {module}, mlrecipe.serve"], capture_output=True)
    return probe.returncode == 0


needs_vllm = pytest.mark.skipif(not has_serve_env(), reason=f"no serving environment with vLLM at {SERVE_ENV} "
                                                            "(run 'make serve-env')")


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
    full = {**cli_env(home), "MLRECIPE_IMAGES": f"{SERVE_IMAGE}={SERVE_ENV}", **(env or {})}
    return subprocess.run([str(BIN / "mlrecipe"), *args], env=full, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's tiny Llama, trained for 20 steps, with its tokenizer (Hugging Face format)."""
    root = tmp_path_factory.mktemp("tiny-model")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(SCRIPTS / "prepare_data.py"), "--out", str(root / "data"),
                    "--vocab-size", "512"], check=True, capture_output=True, env=env)
    subprocess.run([sys.executable, str(SCRIPTS / "train.py"), "--data", str(root / "data"), "--ckpt-dir",
                    str(root / "ckpt"), "--export", str(root / "model"), "--steps", "20", "--batch", "4"],
                   check=True, capture_output=True, env=env)
    return root / "model"


@dataclass
class Release:
    home: Path
    name: str
    url: str
    key: str
    install_output: str


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


#: vLLM's CPU build spends 30-40 s of each engine start compiling the model (torch.compile, saved under
#: ~/.cache/vllm), which these tests' few requests never win back: their servers and engines run eagerly.
EAGER = ("--enforce-eager",)


def start_server(model: Path, name: str, log: Path, engine: str, *extra: str,
                 timeout: float = 300) -> tuple[subprocess.Popen, str]:
    """``python -m mlrecipe.serve --engine ENGINE`` on 127.0.0.1 (a free port), once its /health answers (vLLM
    eager: see :data:`EAGER`), with a ``TMPDIR`` of its own that :func:`stop_server` removes."""
    port = free_port()
    temp = private_tmp()
    extra = (*EAGER, *extra) if engine == "vllm" else extra
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(serve_python()), "-m", "mlrecipe.serve", "--engine", engine, "--model",
                                 str(model), "--served-model-name", name, "--port", str(port), *extra],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": temp})
    _server_temps[proc.pid] = temp
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    stop_server(proc)
    raise AssertionError(log.read_text())


_server_temps: dict[int, str] = {}  # a started server's pid -> its TMPDIR


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group; SIGKILL if it is still there after 30 s; then its ``TMPDIR`` goes."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()
    remove_private_tmp(_server_temps.pop(proc.pid, ""))


RAY_IMAGE = "rayproject/ray:2.52.1-py311-gpu"

# a server that logs a line and never answers its health path, with a 3-second startup budget
NEVER_READY_RECIPE = """
    server:
      command: [python3, -c]
      args: ["'import time; print(\\"loading weights...\\", flush=True); time.sleep(600)'"]
      readiness_probe: {path: /health, period_secs: 1}
      startup_probe: {path: /health, period_secs: 1, failure_threshold: 3}
    """


def rayserve_recipe(model: Path) -> str:
    """A serving/rayserve recipe in the reference's form (serveConfigV2, openai_api:deployment, ENGINE_CONFIG)."""
    return textwrap.dedent(f"""
        image: {RAY_IMAGE}
        ray:
          version: '2.52.1'
          serve_config_v2:
            serveConfigV2: |
              applications:
                - name: tiny
                  import_path: openai_api:deployment
                  runtime_env:
                    env_vars:
                      ENGINE_CONFIG: "/etc/engine-config/engine-config.json"
        engine:
          config:
            model: {model}
            served_model_name: tiny
            max_model_len: 128
            enforce_eager: true
        """)


#: The reference's chart default, and the vLLM the serving environment has.
FRAMEWORKS = ["vllm-0.19.0", "vllm-0.32.0"]


def framework_recipe(model: Path, framework: str, **engine: object) -> str:
    """A serving/rayserve recipe in the reference's form that loads ``openai_api`` from /etc/framework-scripts."""
    config = {"served_model_name": "tiny", "model": str(model), "tokenizer": str(model), "max_model_len": 128,
              "chat_template": str(EXAMPLES / "quickstart" / "chat_template.jinja"), "enable_log_requests": False,
              "disable_log_stats": True, "enforce_eager": True, **engine}
    return textwrap.dedent(f"""
        image: {RAY_IMAGE}
        framework: {framework}
        ray:
          version: '2.52.1'
          serve_config_v2:
            serveConfigV2: |
              applications:
                - name: tiny
                  import_path: openai_api:deployment
                  route_prefix: /
                  runtime_env:
                    env_vars:
                      ENGINE_CONFIG: "/etc/engine-config/engine-config.json"
                      PYTHONPATH: "/etc/framework-scripts"
                  deployments:
                    - name: VLLMDeployment
                      max_ongoing_requests: 32
                      autoscaling_config: {{min_replicas: 1, max_replicas: 1, target_ongoing_requests: 16}}
        engine:
          config: {json.dumps(config)}
        """)
