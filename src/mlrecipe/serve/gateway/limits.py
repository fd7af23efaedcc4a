"""What the gateway admits: the API key, the body size, and which requests count as work (bounded in flight)."""

from __future__ import annotations

import hmac

from mlrecipe.serve.gateway.asgi import Receive, Scope, header

#: Answered without the API key.
OPEN_PATHS = frozenset({"/health", "/metrics", "/ping", "/v2/health/ready", "/v2/health/live"})
#: POSTs to these paths are generation (or other engine) work: at most ``max_inflight`` at once.
WORK_PREFIXES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/score",
                 "/v1/rerank", "/v2/models/", "/pooling", "/classify", "/rerank", "/score", "/tokenize")


class BodyTooLargeError(Exception):
    """A request body longer than the configured limit."""


def authorized(scope: Scope, key: str) -> bool:
    """The request carries ``Authorization: Bearer <key>`` (compared in constant time)."""
    value = (header(scope, b"authorization") or b"").decode("latin-1")
    scheme, _, token = value.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


def needs_key(path: str, key: str | None) -> bool:
    """A key is configured and ``path`` is not one of the open paths."""
    return bool(key) and path not in OPEN_PATHS


def is_work(method: str, path: str) -> bool:
    """The request is engine work, counted against the in-flight bound."""
    return method == "POST" and path.startswith(WORK_PREFIXES)


def declared_too_large(scope: Scope, limit: int) -> bool:
    """The request's ``Content-Length`` exceeds ``limit``."""
    length = header(scope, b"content-length")
    return length is not None and length.isdigit() and int(length) > limit


def has_unsized_body(scope: Scope, method: str) -> bool:
    """A body-carrying method without ``Content-Length`` (a chunked body, to be counted as it arrives)."""
    return header(scope, b"content-length") is None and method in ("POST", "PUT", "PATCH")


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; :class:`BodyTooLargeError` as soon as it passes ``limit`` bytes."""
    parts, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        parts.append(msg.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            raise BodyTooLargeError
        if not msg.get("more_body", False):
            break
    return b"".join(parts)
