"""The one error body the gateway answers with, on every route (OpenAI's, which vLLM also uses):
``{"error": {"message": ..., "type": ..., "param": ..., "code": <status>}}``."""

from __future__ import annotations

import json
from typing import Any

from mlrecipe.serve.gateway.asgi import Send

#: The error type of a status when the caller names none.
ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
               429: "rate_limit_error", 503: "service_unavailable"}


def openai_error(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    kind = kind or ERROR_TYPES.get(status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def send_json(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ``body`` as JSON with ``status`` (and more ``headers``)."""
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def send_error(send: Send, status: int, message: str, kind: str | None = None,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer :func:`openai_error` with ``status``."""
    await send_json(send, status, openai_error(status, message, kind), headers)
