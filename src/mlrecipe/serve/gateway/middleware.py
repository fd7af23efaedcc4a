"""The gateway middleware: each request checked (API key, body size, requests in flight), then routed to the
engine's ``/metrics`` with the gateway's own appended, to the KServe v2 routes, or through to the engine."""

from __future__ import annotations

import time
from typing import Any

from mlrecipe.serve.gateway.asgi import ASGIApp, Message, Receive, Scope, Send, call_app, replay
from mlrecipe.serve.gateway.config import GatewayConfig
from mlrecipe.serve.gateway.errors import send_error
from mlrecipe.serve.gateway.kserve import KServeRoutes
from mlrecipe.serve.gateway.limits import (
    BodyTooLargeError,
    authorized,
    declared_too_large,
    has_unsized_body,
    is_work,
    needs_key,
    read_body,
)
from mlrecipe.serve.gateway.metrics import Metrics, route_label, stream_tokens, usage_tokens
from mlrecipe.serve.placement import move_front_threads


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
        self.kserve = KServeRoutes(app, self.metrics, self.config.server_name, self.config.max_body_bytes)

    def __repr__(self) -> str:  # never show the key
        return f"Gateway(max_inflight={self.config.max_inflight}, auth={'on' if self._key else 'off'})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        route = route_label(path)
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
        if needs_key(path, self._key) and not authorized(scope, self._key or ""):
            self.metrics.reject("unauthorized")
            await send_error(send, 401, "missing or invalid API key (Authorization: Bearer ...)",
                             headers=[(b"www-authenticate", b"Bearer")])
            return
        if path == "/metrics" and method == "GET":
            await self._metrics(scope, receive, send)
            return
        if v2 and method == "GET":
            await self.kserve.get(scope, receive, send, path)
            return
        if declared_too_large(scope, self.config.max_body_bytes):
            await self._too_large(send)
            return
        if has_unsized_body(scope, method):
            try:  # a chunked body: read it (bounded) before anything is answered, then replay it
                receive = replay(await read_body(receive, self.config.max_body_bytes), receive)
            except BodyTooLargeError:
                await self._too_large(send)
                return
        work = is_work(method, path)
        if work and self.metrics.inflight >= self.config.max_inflight:
            self.metrics.reject("overloaded")
            limit = self.config.max_inflight
            busy = f"server busy: {self.metrics.inflight} requests in flight (limit {limit}); retry later"
            await send_error(send, 429, busy, headers=[(b"retry-after", str(self.config.retry_after_s).encode())])
            return
        if work:
            self.metrics.inflight += 1
        try:
            if v2 and method == "POST":
                await self.kserve.post(scope, receive, send, path)
            else:
                await self._passthrough(scope, receive, send, work)
        finally:
            if work:
                self.metrics.inflight -= 1

    async def _too_large(self, send: Send) -> None:
        self.metrics.reject("body_too_large")
        await send_error(send, 413, f"request body larger than {self.config.max_body_bytes} bytes")

    async def _passthrough(self, scope: Scope, receive: Receive, send: Send, work: bool) -> None:
        """The request to the engine unchanged; for work, the tokens of its response counted."""
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
                    self.metrics.add_tokens(stream_tokens(body))
                else:
                    state["json"].append(body)
                    if not message.get("more_body", False):
                        self.metrics.add_tokens(usage_tokens(b"".join(state["json"])))
            await send(message)

        await self.app(scope, receive, counting_send)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The engine's ``/metrics`` (when it answers) followed by the gateway's."""
        status, body = await call_app(self.app, scope, receive, "GET", "/metrics", b"").read()
        text = (body.decode("utf-8", "replace") if status == 200 else "") + self.metrics.render()
        data = text.encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data, "more_body": False})


def wrap(app: ASGIApp, config: GatewayConfig | None = None) -> Gateway:
    """``app`` behind a gateway."""
    return Gateway(app, config)
