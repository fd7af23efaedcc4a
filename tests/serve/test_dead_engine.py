"""A dead vLLM engine inside the Ray Serve deployment (``mlrecipe.serve.ray_openai``): requests get 503 with the
engine's error in an OpenAI-style body (the request it died in too, which vLLM answers 500), and Serve's health check
raises, so Serve marks the application unhealthy.

The deployment runs with a fake engine client in the serving environment's Python (Ray Serve and starlette live
there, not in the project's venv); no engine starts.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.serve.serving import SERVE_ENV, has_serve_env, serve_python

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not has_serve_env("ray.serve, starlette"),
                       reason=f"no serving environment with Ray Serve at {SERVE_ENV} (run 'make serve-env')"),
]

SCRIPT = r'''
import asyncio, json
from starlette.requests import Request
from mlrecipe.serve import ray_openai

class EngineDeadError(Exception):
    pass

class FakeEngineClient:
    def __init__(self, errored):
        self.errored = errored

    @property
    def dead_error(self):
        error = EngineDeadError("EngineCore encountered an issue.")
        error.__cause__ = RuntimeError("Unsupported CPU attention configuration: head_dim=16")
        return error

    async def check_health(self):
        pass

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"served", "more_body": False})

def dying_app(client):
    async def app(scope, receive, send):  # the engine dies during this request; vLLM answers 500
        client.errored = True
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"EngineDeadError", "more_body": False})
    return app

async def ask(deployment):
    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}
    request = Request({"type": "http", "method": "POST", "path": "/v1/completions", "headers": [],
                       "query_string": b""}, receive)
    response = await deployment(request)
    body = b"".join([c async for c in response.body_iterator]) if hasattr(response, "body_iterator") \
        else response.body
    try:
        await deployment.check_health()
        health = None
    except Exception as exc:
        health = f"{type(exc).__name__}: {exc}"
    return {"status": response.status_code, "body": body.decode(), "health": health}

cls = ray_openai.VLLMDeployment.func_or_class
out = {}
for name, errored in (("alive", False), ("dead", True)):
    deployment = cls.__new__(cls)
    deployment.client, deployment.app = FakeEngineClient(errored), app
    out[name] = asyncio.run(ask(deployment))
deployment = cls.__new__(cls)
deployment.client = FakeEngineClient(False)
deployment.app = dying_app(deployment.client)
out["dies"] = asyncio.run(ask(deployment))
print(json.dumps(out))
'''


def run_with_fake_engine() -> dict[str, dict[str, object]]:
    done = subprocess.run([str(serve_python()), "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "RAY_USAGE_STATS_ENABLED": "0"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dead_engine_answers_503_with_its_error_and_fails_the_health_check() -> None:
    out = run_with_fake_engine()
    assert out["alive"] == {"status": 200, "body": "served", "health": None}
    dead = out["dead"]
    assert dead["status"] == 503
    error = json.loads(dead["body"])["error"]
    assert error["code"] == 503 and error["type"] == "ServiceUnavailableError"
    assert "EngineDeadError: EngineCore encountered an issue." in error["message"]
    assert "head_dim=16" in error["message"]
    assert dead["health"] is not None and dead["health"].startswith("RuntimeError: the vLLM engine is dead")
    assert "head_dim=16" in dead["health"]
    assert out["dies"]["status"] == 503 and out["dies"]["body"] == dead["body"]
