"""The gateway: a pure ASGI middleware in front of an OpenAI-compatible engine (vLLM's server or ours).

It adds only what vLLM does not do, and passes every other request through unchanged:

- ``Authorization: Bearer <key>`` enforced on every route but health and metrics when a key is configured
  (compared in constant time; the key is never logged or echoed);
- a request body limit: ``413`` (``Content-Length`` checked first, streamed bodies counted);
- a bounded number of generation requests in flight: beyond it ``429`` with ``Retry-After`` (the server
  stays healthy and answers again as soon as load drops);
- KServe v2 / Triton routes: ``GET /v2``, ``/v2/health/ready``, ``/v2/health/live``, ``/v2/models/<m>``,
  ``/v2/models/<m>/ready``, ``POST /v2/models/<m>/generate`` and ``/generate_stream`` (``text_input`` and
  ``parameters``), translated in-process to the engine's ``/v1/completions``;
- Prometheus metrics appended to the engine's ``/metrics``: requests by route and status, latency,
  generated tokens (total and per second over a sliding window), requests in flight (queue depth),
  rejections.

Configuration: :class:`GatewayConfig`, from the ``MLRECIPE_GATEWAY`` environment variable (JSON) when vLLM
instantiates the middleware itself. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from mlrecipe.serve.placement import move_front_threads

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONFIG_VAR = "MLRECIPE_GATEWAY"
OPEN_PATHS = frozenset({"/health", "/metrics", "/ping", "/v2/health/ready", "/v2/health/live"})
WORK_PREFIXES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/score",
                 "/v1/rerank", "/v2/models/", "/pooling", "/classify", "/rerank", "/score", "/tokenize")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/v2/generate",
          "/v2/generate_stream", "/v2", "/health", "/metrics")


@dataclass
class GatewayConfig:
    """What the gateway enforces; ``api_key_env`` / ``api_key_file`` name where the key is, never the key."""

    max_body_bytes: int = 1 << 20
    max_inflight: int = 64
    retry_after_s: int = 1
    api_key_env: str = "MLRECIPE_API_KEY"
    api_key_file: str | None = None
    tokens_window_s: float = 10.0
    server_name: str = "mlrecipe"

    @classmethod
    def from_env(cls) -> GatewayConfig:
        raw = os.environ.get(CONFIG_VAR)
        data = json.loads(raw) if raw else {}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    def api_key(self) -> str | None:
        if self.api_key_file:
            with open(os.path.expanduser(self.api_key_file), encoding="utf-8") as fh:
                key = fh.read().strip()
            return key or None
        return os.environ.get(self.api_key_env) or None


def openai_error(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    kind = kind or {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
                    429: "rate_limit_error", 503: "service_unavailable"}.get(status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def send_json(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data, "more_body": False})


class Metrics:
    """Counters, gauges and a histogram in the Prometheus text format (no client library needed)."""

    def __init__(self, window_s: float) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        self.latency: dict[str, list[float]] = {}
        self.latency_sum: dict[str, float] = {}
        self.latency_count: dict[str, int] = {}
        self.tokens_total = 0
        self.rejected: dict[str, int] = {}
        self.inflight = 0
        self.window_s = window_s
        self._recent: deque[tuple[float, int]] = deque()

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.latency.setdefault(route, [0.0] * len(LATENCY_BUCKETS))
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        self.latency_sum[route] = self.latency_sum.get(route, 0.0) + seconds
        self.latency_count[route] = self.latency_count.get(route, 0) + 1

    def add_tokens(self, n: int) -> None:
        if n > 0:
            self.tokens_total += n
            now = time.monotonic()
            self._recent.append((now, n))
            self._forget_before(now - self.window_s)

    def _forget_before(self, cutoff: float) -> None:
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()

    def tokens_per_second(self) -> float:
        self._forget_before(time.monotonic() - self.window_s)
        return sum(n for _, n in self._recent) / self.window_s

    def render(self) -> str:
        out = ["# HELP mlrecipe_requests_total HTTP requests through the gateway, by route, method and status.",
               "# TYPE mlrecipe_requests_total counter"]
        for (route, method, status), n in sorted(self.requests.items()):
            out.append(f'mlrecipe_requests_total{{route="{route}",method="{method}",status="{status}"}} {n}')
        out += ["# HELP mlrecipe_request_duration_seconds Request latency (to the last byte), by route.",
                "# TYPE mlrecipe_request_duration_seconds histogram"]
        for route, buckets in sorted(self.latency.items()):
            for bound, hits in zip(LATENCY_BUCKETS, buckets, strict=True):
                out.append(f'mlrecipe_request_duration_seconds_bucket{{route="{route}",le="{bound}"}} {hits:.0f}')
            count = self.latency_count[route]
            out.append(f'mlrecipe_request_duration_seconds_bucket{{route="{route}",le="+Inf"}} {count}')
            out.append(f'mlrecipe_request_duration_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
            out.append(f'mlrecipe_request_duration_seconds_count{{route="{route}"}} {count}')
        out += ["# HELP mlrecipe_generated_tokens_total Generated tokens (usage; one per streamed chunk).",
                "# TYPE mlrecipe_generated_tokens_total counter",
                f"mlrecipe_generated_tokens_total {self.tokens_total}",
                f"# HELP mlrecipe_generated_tokens_per_second Generated tokens per second over {self.window_s:g}s.",
                "# TYPE mlrecipe_generated_tokens_per_second gauge",
                f"mlrecipe_generated_tokens_per_second {self.tokens_per_second():.3f}",
                "# HELP mlrecipe_queue_depth Generation requests admitted and not finished (queued or running).",
                "# TYPE mlrecipe_queue_depth gauge",
                f"mlrecipe_queue_depth {self.inflight}",
                "# HELP mlrecipe_rejected_total Requests refused by the gateway, by reason.",
                "# TYPE mlrecipe_rejected_total counter"]
        for reason, n in sorted(self.rejected.items()):
            out.append(f'mlrecipe_rejected_total{{reason="{reason}"}} {n}')
        return "\n".join(out) + "\n"


def _route(path: str) -> str:
    if path.startswith("/v2/models/"):
        if path.endswith("/generate_stream"):
            return "/v2/generate_stream"
        return "/v2/generate" if path.endswith("/generate") else "/v2"
    if path.startswith("/v2"):
        return "/v2"
    return path if path in ROUTES else "other"


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value
    return None


def _count_stream_tokens(chunk: bytes) -> int:
    """Streamed chunks that carry generated text (about one token each on vLLM)."""
    return chunk.count(b'"text":"') + chunk.count(b'"content":"') - chunk.count(b'"text":""') \
        - chunk.count(b'"content":""')


class BodyTooLargeError(Exception):
    pass


class InProcessCall:
    """One in-process call of an ASGI app with a complete body, its response read message by message.

    ``receive`` serves the body once, then the caller's own ``receive`` (``http.disconnect`` when the client
    goes away).
    """

    def __init__(self, app: ASGIApp, scope: Scope, receive: Receive, body: bytes) -> None:
        self.queue: asyncio.Queue[Message | None] = asyncio.Queue()
        sent = False

        async def inner_receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # http.disconnect when the client goes away

        async def inner_send(message: Message) -> None:
            await self.queue.put(message)

        self.task = asyncio.ensure_future(app(scope, inner_receive, inner_send))
        self.task.add_done_callback(lambda _t: self.queue.put_nowait(None))

    async def start(self) -> tuple[int, dict[bytes, bytes]]:
        while True:
            msg = await self.queue.get()
            if msg is None:
                return 500, {}
            if msg["type"] == "http.response.start":
                return int(msg["status"]), {k.lower(): v for k, v in msg.get("headers") or []}

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            msg = await self.queue.get()
            if msg is None:
                return
            if msg["type"] == "http.response.body":
                yield msg.get("body", b"")
                if not msg.get("more_body", False):
                    return

    async def read(self) -> tuple[int, bytes]:
        status, _ = await self.start()
        body = b"".join([c async for c in self.chunks()])
        return status, body

    def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()


def _gateway_call(app: ASGIApp, scope: Scope, receive: Receive, method: str, path: str, body: bytes) -> InProcessCall:
    """A gateway-made request (``method path`` with a JSON ``body``) to the wrapped app."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"host", _header(scope, b"host") or b"127.0.0.1")]
    sub = {**scope, "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
           "headers": headers}
    return InProcessCall(app, sub, receive, body)


class Gateway:
    """ASGI middleware; ``Gateway(app)`` reads its config from the environment (vLLM's --middleware).

    Built when the app starts, after vLLM's engine processes: the moment to move the front's threads to the CPUs
    ``mlrecipe.serve`` chose for them (:mod:`mlrecipe.serve.placement`).
    """

    def __init__(self, app: ASGIApp, config: GatewayConfig | None = None) -> None:
        move_front_threads()
        self.app = app
        self.config = config or GatewayConfig.from_env()
        self._key = self.config.api_key()
        self.metrics = Metrics(self.config.tokens_window_s)

    def __repr__(self) -> str:  # never show the key
        return f"Gateway(max_inflight={self.config.max_inflight}, auth={'on' if self._key else 'off'})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        route = _route(path)
        started = time.perf_counter()
        status_box = [0]

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = int(message["status"])
            await send(message)

        try:
            await self._handle(scope, receive, tracked_send, path, method)
        finally:
            if route != "/metrics":
                self.metrics.observe(route, method, status_box[0] or 499, time.perf_counter() - started)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, path: str, method: str) -> None:
        v2 = path == "/v2" or path.startswith("/v2/")
        if self._key and path not in OPEN_PATHS and not self._authorized(scope, self._key):
            self.metrics.rejected["unauthorized"] = self.metrics.rejected.get("unauthorized", 0) + 1
            await send_json(send, 401, openai_error(401, "missing or invalid API key (Authorization: Bearer ...)"),
                            [(b"www-authenticate", b"Bearer")])
            return
        if path == "/metrics" and method == "GET":
            await self._metrics(scope, receive, send)
            return
        if v2 and method == "GET":
            await self._v2_get(scope, receive, send, path)
            return
        length = _header(scope, b"content-length")
        limit = self.config.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            await self._too_large(send)
            return
        if length is None and method in ("POST", "PUT", "PATCH"):
            try:  # a chunked body: read it (bounded) before anything is answered, then replay it
                receive = _replay(await self._read_body(receive), receive)
            except BodyTooLargeError:
                await self._too_large(send)
                return
        work = method == "POST" and path.startswith(WORK_PREFIXES)
        if work and self.metrics.inflight >= self.config.max_inflight:
            self.metrics.rejected["overloaded"] = self.metrics.rejected.get("overloaded", 0) + 1
            await send_json(send, 429, openai_error(
                429, f"server busy: {self.metrics.inflight} requests in flight (limit {self.config.max_inflight}); "
                     "retry later"), [(b"retry-after", str(self.config.retry_after_s).encode())])
            return
        if work:
            self.metrics.inflight += 1
        try:
            if v2 and method == "POST":
                await self._v2_post(scope, receive, send, path)
            else:
                await self._passthrough(scope, receive, send, path, work)
        finally:
            if work:
                self.metrics.inflight -= 1

    def _authorized(self, scope: Scope, key: str) -> bool:
        value = (_header(scope, b"authorization") or b"").decode("latin-1")
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())

    async def _too_large(self, send: Send) -> None:
        self.metrics.rejected["body_too_large"] = self.metrics.rejected.get("body_too_large", 0) + 1
        await send_json(send, 413, openai_error(413, f"request body larger than {self.config.max_body_bytes} bytes"))

    async def _read_body(self, receive: Receive) -> bytes:
        parts, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            parts.append(msg.get("body", b""))
            size += len(parts[-1])
            if size > self.config.max_body_bytes:
                raise BodyTooLargeError
            if not msg.get("more_body", False):
                break
        return b"".join(parts)

    async def _passthrough(self, scope: Scope, receive: Receive, send: Send, path: str, work: bool) -> None:
        if not work:
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = {"stream": False, "json": []}

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctype = dict((k.lower(), v) for k, v in message.get("headers") or []).get(b"content-type", b"")
                state["stream"] = ctype.startswith(b"text/event-stream")
                state["ok"] = int(message["status"]) == 200
            elif message["type"] == "http.response.body" and state.get("ok"):
                body = message.get("body", b"")
                if state["stream"]:
                    self.metrics.add_tokens(_count_stream_tokens(body))
                else:
                    state["json"].append(body)
                    if not message.get("more_body", False):
                        self.metrics.add_tokens(_usage_tokens(b"".join(state["json"])))
            await send(message)

        await self.app(scope, receive, counting_send)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = _gateway_call(self.app, scope, receive, "GET", "/metrics", b"")
        status, body = await inner.read()
        text = (body.decode("utf-8", "replace") if status == 200 else "") + self.metrics.render()
        data = text.encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _models(self, scope: Scope, receive: Receive) -> list[str]:
        status, body = await _gateway_call(self.app, scope, receive, "GET", "/v1/models", b"").read()
        if status != 200:
            return []
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return [m["id"] for m in json.loads(body)["data"]]
        return []

    async def _v2_get(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        if path == "/v2/health/live":
            await send_json(send, 200, {"live": True})
            return
        if path == "/v2/health/ready":
            status, _ = await _gateway_call(self.app, scope, receive, "GET", "/health", b"").read()
            await send_json(send, 200 if status == 200 else 503, {"ready": status == 200})
            return
        if parts == ["v2"]:
            await send_json(send, 200, {"name": self.config.server_name, "version": "1",
                                        "extensions": ["generate", "generate_stream"]})
            return
        if len(parts) >= 3 and parts[1] == "models":
            name = parts[2]
            if name not in await self._models(scope, receive):
                await send_json(send, 404, {"error": f"unknown model '{name}'"})
                return
            if parts[3:] == ["ready"]:
                await send_json(send, 200, {"name": name, "ready": True})
                return
            if not parts[3:] or parts[3:4] == ["versions"]:
                await send_json(send, 200, {
                    "name": name, "versions": ["1"], "platform": "vllm",
                    "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
                    "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}]})
                return
        await send_json(send, 404, {"error": f"no route {path}"})

    async def _v2_post(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        if len(parts) != 4 or parts[1] != "models" or parts[3] not in ("generate", "generate_stream"):
            await send_json(send, 404, {"error": f"no route {path}"})
            return
        name, stream = parts[2], parts[3] == "generate_stream"
        try:
            raw = await self._read_body(receive)
        except BodyTooLargeError:
            await self._too_large(send)
            return
        try:
            request = translate_generate(name, raw, stream)
        except ValueError as exc:
            await send_json(send, 400, {"error": str(exc)})
            return
        prompt = request.pop("_prompt")
        echo = request.pop("_echo_input")
        inner = _gateway_call(self.app, scope, receive, "POST", "/v1/completions", json.dumps(request).encode())
        try:
            status, _headers = await inner.start()
            if status != 200 or not stream:
                body = b"".join([c async for c in inner.chunks()])
                await self._v2_reply(send, status, body, name, prompt if echo else "")
                return
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
            buffer = b""
            first = True
            async for chunk in inner.chunks():
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    text = _sse_text(event)
                    if text is None:
                        continue
                    if first and echo:
                        text = prompt + text
                    first = False
                    self.metrics.add_tokens(1)
                    out = {"model_name": name, "model_version": "1", "text_output": text}
                    await send({"type": "http.response.body", "body": b"data: " + json.dumps(out).encode() + b"\n\n",
                                "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            inner.cancel()

    async def _v2_reply(self, send: Send, status: int, body: bytes, name: str, prefix: str) -> None:
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
        if status != 200:
            err = data.get("error") if isinstance(data, dict) else None
            message = err.get("message") if isinstance(err, dict) else (err or body.decode("utf-8", "replace"))
            await send_json(send, status, {"error": message})
            return
        text = data["choices"][0]["text"]
        self.metrics.add_tokens(int((data.get("usage") or {}).get("completion_tokens") or 0))
        await send_json(send, 200, {"model_name": name, "model_version": "1", "text_output": prefix + text})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = [False]

    async def replay() -> Message:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _usage_tokens(body: bytes) -> int:
    try:
        usage = json.loads(body).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0


def _sse_text(event: bytes) -> str | None:
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


SAMPLING_KEYS = {"max_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int,
                 "min_tokens": int, "presence_penalty": float, "frequency_penalty": float,
                 "repetition_penalty": float, "ignore_eos": bool}


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


def wrap(app: ASGIApp, config: GatewayConfig | None = None) -> Gateway:
    return Gateway(app, config)


__all__ = ["Gateway", "GatewayConfig", "openai_error", "translate_generate", "wrap"]
