"""``openai_api:deployment``: vLLM's own OpenAI-compatible server as a Ray Serve application.

This one file is ``scripts/vllm-<version>/openai_api.py`` of the ``serving/rayserve`` chart for every version folder
(each is a link to it; the chart's ConfigMap and the wheel carry its content), delivered at
``/etc/framework-scripts``, and mlrecipe's module ``mlrecipe.serve.ray_openai``. Images that run it have Ray Serve
and vLLM, not necessarily mlrecipe, so it needs nothing else; where mlrecipe is installed (its local and Slurm
backends) the app is served behind mlrecipe's gateway (API key, request limits, KServe v2 routes, metrics).

The engine configuration, as the reference recipes give it:

- ``$ENGINE_CONFIG`` names a JSON object (the chart's ``/etc/engine-config/engine-config.json``): ``ValueError``
  when unset, ``FileNotFoundError`` when the file is missing;
- ``served_model_name`` and ``model`` are required; ``supported_tasks`` (default ``["generate"]``) is popped and
  used only when the engine does not report its tasks;
- every other key is a ``vllm serve`` argument, engine or front-end, with ``_`` for ``-``, parsed by vLLM's own
  parser; a key vLLM does not know is a ``ValueError`` naming it, raised before any engine starts: when this module
  is imported with ``$ENGINE_CONFIG`` set (Serve's build step: the application fails to deploy), and by the
  constructor.

The deployment is class ``VLLMDeployment`` (the name a Serve config's ``deployments`` override uses), bound with no
arguments. vLLM moved its server modules across releases (``vllm.entrypoints.openai.*`` up to 0.19,
``vllm.entrypoints.launchers.*`` later) and changed the signatures of ``build_app`` and ``init_app_state``; both
are found by feature detection, so every version folder delivers this file unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import importlib
import importlib.util
import inspect
import io
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, redirect_stderr
from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

ENGINE_CONFIG_VAR = "ENGINE_CONFIG"
DEFAULT_TASKS = ("generate",)

#: Where each vLLM name lives, newest layout first.
VLLM_NAMES: dict[str, tuple[str, ...]] = {
    "FlexibleArgumentParser": ("vllm.utils.argparse_utils", "vllm.utils"),
    "make_arg_parser": ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"),
    "validate_parsed_serve_args": ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"),
    "build_async_engine_client": ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server"),
    "build_app": ("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"),
    "init_app_state": ("vllm.entrypoints.launchers.api_server.app_state", "vllm.entrypoints.openai.api_server"),
}


def vllm_name(name: str) -> Any:
    """``name`` from the first of its :data:`VLLM_NAMES` modules that this vLLM has."""
    for module in VLLM_NAMES[name]:
        try:
            present = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            present = False
        found = getattr(importlib.import_module(module), name, None) if present else None
        if found is not None:
            return found
    raise ImportError(f"vLLM {importlib.import_module('vllm').__version__} has no {name} "
                      f"(looked in {', '.join(VLLM_NAMES[name])})")


async def call_by_name(fn: Callable[..., Any], **offered: Callable[[], Any]) -> Any:
    """``fn`` (sync or async) called with the parameters its signature names, each made by its (maybe async) maker."""
    kwargs = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name in offered:
            value = offered[param.name]()
            kwargs[param.name] = await value if inspect.isawaitable(value) else value
        elif param.default is inspect.Parameter.empty and param.kind is not param.VAR_KEYWORD:
            raise TypeError(f"{fn.__module__}.{fn.__name__} wants '{param.name}', which this script cannot give")
    result = fn(**kwargs)
    return await result if inspect.isawaitable(result) else result


def read_engine_config(path: str | None) -> dict[str, Any]:
    """The engine configuration in the JSON file ``path`` (``$ENGINE_CONFIG``)."""
    if not path:
        raise ValueError(f"${ENGINE_CONFIG_VAR} is not set: it names the engine configuration (a JSON file)")
    if not Path(path).is_file():
        raise FileNotFoundError(f"{ENGINE_CONFIG_VAR}={path}: no such file")
    config = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the engine configuration must be a JSON object")
    for key in ("served_model_name", "model"):
        if not config.get(key):
            raise ValueError(f"{path}: '{key}' is required")
    return config


def option_words(action: argparse.Action, value: Any) -> list[str]:
    """``value`` of a JSON key as the command-line words of its vLLM option."""
    longs = [s for s in action.option_strings if s.startswith("--")] or action.option_strings
    flag = next((s for s in longs if not s.startswith("--no-")), longs[0])
    if value is None:
        return []
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise ValueError(f"'{action.dest}' is a switch: true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return [flag if value else "--no-" + flag[2:]]
        return [flag] if value == bool(action.const) else []
    if isinstance(value, list) and action.nargs not in (None, "?"):
        return [flag, *(json.dumps(v) if isinstance(v, dict | list) else str(v) for v in value)]
    return [flag, json.dumps(value) if isinstance(value, dict | list) else str(value)]


def serve_args(options: dict[str, Any], source: str = "engine config") -> argparse.Namespace:
    """vLLM's parsed ``vllm serve`` arguments for ``options``; ``ValueError`` naming what vLLM does not accept."""
    import vllm

    parser = vllm_name("make_arg_parser")(vllm_name("FlexibleArgumentParser")())
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    unknown = [key for key in options if key not in actions]
    if unknown:
        hints = [f"{key} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, actions, n=1))
                 else key for key in unknown]
        raise ValueError(f"{source}: not an engine argument of vLLM {vllm.__version__}: {', '.join(hints)}")
    try:
        argv = [word for key, value in options.items() for word in option_words(actions[key], value)]
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    errors = io.StringIO()
    try:
        with redirect_stderr(errors):
            args = parser.parse_args(argv)
    except SystemExit:
        reason = (errors.getvalue().strip().splitlines() or ["invalid arguments"])[-1].split("error: ", 1)[-1]
        raise ValueError(f"{source}: vLLM {vllm.__version__} rejects it: {reason}") from None
    try:
        vllm_name("validate_parsed_serve_args")(args)
    except ImportError:
        pass
    except Exception as exc:  # vLLM's validation errors have no common base
        raise ValueError(f"{source}: {exc}") from exc
    return args


def engine_setup(path: str | None) -> tuple[argparse.Namespace, tuple[str, ...]]:
    """The server arguments and the fallback tasks of the engine configuration in ``path``, checked."""
    options = read_engine_config(path)
    tasks = tuple(options.pop("supported_tasks", None) or DEFAULT_TASKS)
    return serve_args(options, f"{ENGINE_CONFIG_VAR}={path}"), tasks


def with_gateway(app: Any) -> Any:
    """``app`` behind mlrecipe's gateway where mlrecipe is installed, else ``app`` itself."""
    try:
        from mlrecipe.serve.gateway import Gateway, GatewayConfig
    except ImportError:
        return app
    return Gateway(app, GatewayConfig.from_env())


async def forward(app: Any, request: Request) -> Response:
    """``request`` answered by the ASGI ``app`` in this process, its response body streamed as the app sends it."""
    body = await request.body()
    sent: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return pending.pop() if pending else await request.receive()

    task = asyncio.ensure_future(app({**request.scope, "root_path": ""}, receive, sent.put))
    task.add_done_callback(lambda _: sent.put_nowait(None))
    start = await sent.get()
    while start is not None and start["type"] != "http.response.start":
        start = await sent.get()
    if start is None:
        exc = task.exception() if not task.cancelled() else None
        return Response(f"the engine sent no response: {exc!r}", status_code=500)
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in start.get("headers", [])
               if k.lower() != b"content-length"}

    async def body_chunks() -> AsyncIterator[bytes]:
        try:
            while (message := await sent.get()) is not None:
                if message["type"] == "http.response.body":
                    yield message.get("body", b"")
                    if not message.get("more_body"):
                        return
        finally:
            task.cancel()

    return StreamingResponse(body_chunks(), status_code=start["status"], headers=headers,
                             media_type=headers.get("content-type"))


class InProcessServer:
    """What vLLM's error handlers expect at ``app.state.server`` (the uvicorn server, which an app inside a Serve
    replica has none of): they set ``should_exit`` when the engine died, which :func:`dead_engine` also reports."""

    should_exit = False


def dead_engine(client: Any) -> BaseException | None:
    """The engine's error when vLLM's engine client reports its engine dead (``errored``), else ``None``."""
    if not getattr(client, "errored", False):  # the engine client's attributes differ across vLLM versions
        return None
    found = getattr(client, "dead_error", None)
    return found if isinstance(found, BaseException) else RuntimeError("the vLLM engine is dead")


def engine_error_text(exc: BaseException) -> str:
    """``exc`` with its type and its first cause, as a one-line message."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    return f"{text} (caused by {type(cause).__name__}: {cause})" if cause is not None else text


def engine_dead_response(exc: BaseException) -> Response:
    """503 with an OpenAI-style error body carrying the dead engine's error."""
    message = f"the model's engine is dead and no longer serves: {engine_error_text(exc)}"
    return JSONResponse({"error": {"message": message, "type": "ServiceUnavailableError", "param": None,
                                   "code": 503}}, status_code=503)


@serve.deployment(ray_actor_options={"num_cpus": 0})
class VLLMDeployment:
    """One vLLM engine behind vLLM's own OpenAI application (``/v1/completions``, ``/v1/chat/completions``, ...)."""

    async def __init__(self) -> None:  # type: ignore[misc]  # Ray Serve awaits an async constructor
        args, tasks = engine_setup(os.environ.get(ENGINE_CONFIG_VAR))
        print(f"openai_api ({__file__}): vLLM {importlib.import_module('vllm').__version__} serving "
              f"{args.served_model_name} from {args.model}", flush=True)
        self._stack = AsyncExitStack()
        self.client = await self._stack.enter_async_context(vllm_name("build_async_engine_client")(args))
        if hasattr(self.client, "get_supported_tasks"):
            tasks = tuple(await self.client.get_supported_tasks())
        made = {"args": lambda: args, "supported_tasks": lambda: tasks, "engine_client": lambda: self.client,
                "model_config": self._model_config, "vllm_config": self._vllm_config}
        app = await call_by_name(vllm_name("build_app"), **made)
        await call_by_name(vllm_name("init_app_state"), state=lambda: app.state, **made)
        if not hasattr(app.state, "server"):
            app.state.server = InProcessServer()
        self.app = with_gateway(app)

    async def _model_config(self) -> Any:
        found = getattr(self.client, "model_config", None)
        return found if found is not None else await self.client.get_model_config()

    async def _vllm_config(self) -> Any:
        found = getattr(self.client, "vllm_config", None)
        return found if found is not None else await self.client.get_vllm_config()

    async def check_health(self) -> None:
        """Serve's health check: the engine's own; a dead engine raises, so Serve marks the replica unhealthy."""
        dead = dead_engine(self.client)
        if dead is not None:
            raise RuntimeError(f"the vLLM engine is dead: {engine_error_text(dead)}") from dead
        await self.client.check_health()

    async def __call__(self, request: Request) -> Response:
        """The app's answer; 503 with the engine's error once the engine is dead (also for the request it died in,
        which vLLM answers 500)."""
        dead = dead_engine(self.client)
        if dead is None:
            response = await forward(self.app, request)
            dead = dead_engine(self.client) if response.status_code >= 500 else None
            if dead is None:
                return response
        return engine_dead_response(dead)


if os.environ.get(ENGINE_CONFIG_VAR):
    engine_setup(os.environ[ENGINE_CONFIG_VAR])  # Serve's import of this module fails on a bad configuration
deployment = VLLMDeployment.bind()  # type: ignore[attr-defined]  # @serve.deployment made it a Deployment
