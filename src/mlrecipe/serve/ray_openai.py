"""A Ray Serve application: vLLM's OpenAI-compatible API in a Serve deployment, behind the mlrecipe gateway.

The engine arguments come from the JSON file named by ``$ENGINE_CONFIG`` (the rayserve chart's
``engine.config``: ``{"model": ..., "served_model_name": ..., "max_model_len": ...}``; keys are vLLM's
``vllm serve`` options with ``_`` for ``-``). Import path ``mlrecipe.serve.ray_openai:deployment``; the
``openai_api:deployment`` import path of reference recipes resolves here through
:mod:`mlrecipe.serve.rayserve` (a one-line ``openai_api`` module it puts on ``PYTHONPATH``).

Each replica starts one vLLM engine (``build_async_engine_client``) and answers every HTTP request with
vLLM's own FastAPI application wrapped in :class:`~mlrecipe.serve.gateway.Gateway` (API key, limits,
KServe v2 routes, metrics), so the API is the same as ``python -m mlrecipe.serve``.
"""

from __future__ import annotations

import json
import os
from argparse import Namespace
from contextlib import AsyncExitStack
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from mlrecipe.serve.cli import CPU_MEMORY_FRACTION, on_cpu, set_cpu_env
from mlrecipe.serve.gateway import Gateway, GatewayConfig, InProcessCall

ENGINE_CONFIG_VAR = "ENGINE_CONFIG"


def engine_argv(config: dict[str, Any]) -> list[str]:
    """``vllm serve`` options from a JSON engine config: ``{"max_model_len": 128}`` -> ``--max-model-len 128``."""
    argv: list[str] = []
    for key, value in config.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def engine_args(config: dict[str, Any]) -> Namespace:
    """vLLM's parsed server arguments for ``config`` (the same parser as ``vllm serve``)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if on_cpu():
        set_cpu_env()
        config = {"gpu_memory_utilization": float(CPU_MEMORY_FRACTION), **config}
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(engine_argv(config))
    validate_parsed_serve_args(args)
    return args


def read_engine_config() -> dict[str, Any]:
    path = os.environ.get(ENGINE_CONFIG_VAR)
    if not path:
        raise RuntimeError(f"${ENGINE_CONFIG_VAR} is not set: it names the JSON file of vLLM engine arguments")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    if not isinstance(config, dict) or "model" not in config:
        raise RuntimeError(f"{path}: the engine config must be a JSON object with at least 'model'")
    return config


@serve.deployment(name="vllm-openai", ray_actor_options={"num_cpus": 0})
class OpenAIServer:
    """One vLLM engine; every request goes through the gateway to vLLM's OpenAI application."""

    async def __init__(self) -> None:
        from vllm.entrypoints.openai.api_server import build_app, build_async_engine_client, init_app_state

        args = engine_args(read_engine_config())
        self._stack = AsyncExitStack()
        client = await self._stack.enter_async_context(build_async_engine_client(args))
        tasks = await client.get_supported_tasks()
        app = build_app(args, tasks, client.model_config)
        await init_app_state(client, app.state, args, tasks)
        self.app = Gateway(app, GatewayConfig.from_env())

    async def __call__(self, request: Request) -> Response:
        scope = {**request.scope, "root_path": ""}
        call = InProcessCall(self.app, scope, request.receive, await request.body())
        status, headers = await call.start()
        if status == 500 and not headers:
            return Response("no response from the engine", status_code=500)
        shown = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items() if k != b"content-length"}

        async def chunks():
            try:
                async for chunk in call.chunks():
                    yield chunk
            finally:
                call.cancel()

        return StreamingResponse(chunks(), status_code=status, headers=shown, media_type=shown.get("content-type"))


deployment = OpenAIServer.bind()
