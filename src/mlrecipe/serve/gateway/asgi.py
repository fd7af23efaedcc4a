"""ASGI plumbing the gateway needs: the message types, header lookup, a body replayed once, and in-process calls
of the wrapped app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The value of request header ``name`` (lower case), or None."""
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that serves ``body`` once, then the caller's own ``receive``."""
    sent = [False]

    async def replayed() -> Message:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # http.disconnect when the client goes away

    return replayed


class InProcessCall:
    """One in-process call of an ASGI app with a complete body, its response read message by message.

    ``receive`` serves the body once, then the caller's own ``receive`` (``http.disconnect`` when the client
    goes away).
    """

    def __init__(self, app: ASGIApp, scope: Scope, receive: Receive, body: bytes) -> None:
        self.queue: asyncio.Queue[Message | None] = asyncio.Queue()

        async def inner_send(message: Message) -> None:
            await self.queue.put(message)

        self.task = asyncio.ensure_future(app(scope, replay(body, receive), inner_send))
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


def call_app(app: ASGIApp, scope: Scope, receive: Receive, method: str, path: str, body: bytes) -> InProcessCall:
    """A gateway-made request (``method path`` with a JSON ``body``) to the wrapped app."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"host", header(scope, b"host") or b"127.0.0.1")]
    sub = {**scope, "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
           "headers": headers}
    return InProcessCall(app, sub, receive, body)
