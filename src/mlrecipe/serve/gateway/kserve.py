"""The KServe v2 / Triton routes, translated in-process to the engine's OpenAI ``/v1/completions``.

``GET /v2``, ``/v2/health/ready``, ``/v2/health/live``, ``/v2/models/<m>``, ``/v2/models/<m>/ready``;
``POST /v2/models/<m>/generate`` and ``/generate_stream`` (``text_input`` and ``parameters``). Errors are the
gateway's one error body (:mod:`mlrecipe.serve.gateway.errors`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from mlrecipe.serve.gateway.asgi import ASGIApp, InProcessCall, Receive, Scope, Send, call_app
from mlrecipe.serve.gateway.errors import send_error, send_json
from mlrecipe.serve.gateway.limits import BodyTooLargeError, read_body
from mlrecipe.serve.gateway.metrics import Metrics

SAMPLING_KEYS = {"max_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int,
                 "min_tokens": int, "presence_penalty": float, "frequency_penalty": float,
                 "repetition_penalty": float, "ignore_eos": bool}
MODEL_METADATA = {"versions": ["1"], "platform": "vllm",
                  "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
                  "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}]}


def translate_generate(model: str, raw: bytes, stream: bool) -> dict[str, Any]:
    """A Triton / KServe v2 ``generate`` body -> an OpenAI ``/v1/completions`` body; ValueError when bad.

    Accepted: ``text_input`` (string), ``parameters`` (object) or sampling keys at the top level, and the
    vLLM backend's ``sampling_parameters`` (a JSON string). ``max_new_tokens`` is read as ``max_tokens``.
    Like Triton's vLLM backend, ``text_output`` starts with the prompt unless ``exclude_input_in_output``.
    """
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise ValueError(f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with 'text_input'")
    text = body.get("text_input")
    if isinstance(text, list) and len(text) == 1:
        text = text[0]
    if not isinstance(text, str):
        raise ValueError("'text_input' is required and must be a string")
    params: dict[str, Any] = {}
    sampling = body.get("sampling_parameters")
    if isinstance(sampling, str):
        try:
            sampling = json.loads(sampling)
        except ValueError:
            raise ValueError("'sampling_parameters' must be a JSON object string") from None
    for source in (sampling, body.get("parameters"), {k: v for k, v in body.items() if k != "parameters"}):
        if source is None:
            continue
        if not isinstance(source, dict):
            raise ValueError("'parameters' must be an object")
        params.update(source)
    if "max_new_tokens" in params and "max_tokens" not in params:
        params["max_tokens"] = params["max_new_tokens"]
    out: dict[str, Any] = {"model": model, "prompt": text, "max_tokens": 16}
    for key, kind in SAMPLING_KEYS.items():
        if key not in params:
            continue
        value = params[key]
        if kind is bool:
            if isinstance(value, str):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError(f"parameter '{key}' must be a boolean")
        elif isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"parameter '{key}' must be a number")
        else:
            try:
                value = kind(value)
            except ValueError:
                raise ValueError(f"parameter '{key}' must be a number") from None
        out[key] = value
    if "stop" in params:
        stop = params["stop"]
        if not (isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))):
            raise ValueError("parameter 'stop' must be a string or a list of strings")
        out["stop"] = stop
    if stream:
        out["stream"] = True
    exclude = params.get("exclude_input_in_output", False)
    out["_echo_input"] = not (exclude is True or str(exclude).lower() == "true")
    out["_prompt"] = text
    return out


def sse_text(event: bytes) -> str | None:
    """The generated text of one SSE event of /v1/completions (None for [DONE] and non-data events)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return None
            try:
                return json.loads(payload)["choices"][0]["text"]
            except (ValueError, KeyError, IndexError, TypeError):
                return None
    return None


def engine_error(body: bytes) -> tuple[str, str | None]:
    """(message, type) of an engine's error response: its OpenAI error, else its body as text."""
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("message")), err.get("type") if isinstance(err.get("type"), str) else None
    return str(err or body.decode("utf-8", "replace")), None


class KServeRoutes:
    """The v2 routes of one gateway: ``app`` is the engine, ``metrics`` counts the tokens they generate."""

    def __init__(self, app: ASGIApp, metrics: Metrics, server_name: str, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.server_name = server_name
        self.max_body_bytes = max_body_bytes

    async def models(self, scope: Scope, receive: Receive) -> list[str]:
        """The engine's model ids (``GET /v1/models``), [] when it cannot say."""
        status, body = await call_app(self.app, scope, receive, "GET", "/v1/models", b"").read()
        if status != 200:
            return []
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return [m["id"] for m in json.loads(body)["data"]]
        return []

    async def get(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        if path == "/v2/health/live":
            await send_json(send, 200, {"live": True})
            return
        if path == "/v2/health/ready":
            status, _ = await call_app(self.app, scope, receive, "GET", "/health", b"").read()
            await send_json(send, 200 if status == 200 else 503, {"ready": status == 200})
            return
        if parts == ["v2"]:
            await send_json(send, 200, {"name": self.server_name, "version": "1",
                                        "extensions": ["generate", "generate_stream"]})
            return
        if len(parts) >= 3 and parts[1] == "models":
            name = parts[2]
            if name not in await self.models(scope, receive):
                await send_error(send, 404, f"unknown model '{name}'")
                return
            if parts[3:] == ["ready"]:
                await send_json(send, 200, {"name": name, "ready": True})
                return
            if not parts[3:] or parts[3:4] == ["versions"]:
                await send_json(send, 200, {"name": name, **MODEL_METADATA})
                return
        await send_error(send, 404, f"no route {path}")

    async def post(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """``generate`` / ``generate_stream``; the caller has checked the body size and counts the request."""
        parts = [p for p in path.split("/") if p]
        if len(parts) != 4 or parts[1] != "models" or parts[3] not in ("generate", "generate_stream"):
            await send_error(send, 404, f"no route {path}")
            return
        name, stream = parts[2], parts[3] == "generate_stream"
        try:
            raw = await read_body(receive, self.max_body_bytes)
        except BodyTooLargeError:
            self.metrics.reject("body_too_large")
            await send_error(send, 413, f"request body larger than {self.max_body_bytes} bytes")
            return
        try:
            request = translate_generate(name, raw, stream)
        except ValueError as exc:
            await send_error(send, 400, str(exc))
            return
        prompt = request.pop("_prompt")
        echo = request.pop("_echo_input")
        inner = call_app(self.app, scope, receive, "POST", "/v1/completions", json.dumps(request).encode())
        try:
            status, _headers = await inner.start()
            if status != 200 or not stream:
                body = b"".join([c async for c in inner.chunks()])
                await self._reply(send, status, body, name, prompt if echo else "")
                return
            await self._stream(send, inner, name, prompt if echo else "")
        finally:
            inner.cancel()

    async def _stream(self, send: Send, inner: InProcessCall, name: str, prefix: str) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        buffer = b""
        async for chunk in inner.chunks():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                text = sse_text(event)
                if text is None:
                    continue
                text, prefix = prefix + text, ""
                self.metrics.add_tokens(1)
                out = {"model_name": name, "model_version": "1", "text_output": text}
                await send({"type": "http.response.body", "body": b"data: " + json.dumps(out).encode() + b"\n\n",
                            "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _reply(self, send: Send, status: int, body: bytes, name: str, prefix: str) -> None:
        if status != 200:
            message, kind = engine_error(body)
            await send_error(send, status, message, kind)
            return
        data = json.loads(body)
        text = data["choices"][0]["text"]
        self.metrics.add_tokens(int((data.get("usage") or {}).get("completion_tokens") or 0))
        await send_json(send, 200, {"model_name": name, "model_version": "1", "text_output": prefix + text})
