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

Every error it answers, on the OpenAI and the v2 routes alike, has one body:
``{"error": {"message", "type", "param", "code"}}``.

One module a job: :mod:`.middleware` (the :class:`Gateway`: checks, then routing), :mod:`.limits` (API key, body
size, what counts as work), :mod:`.kserve` (the v2 routes and their translation to OpenAI completions),
:mod:`.metrics`, :mod:`.errors` (the error body), :mod:`.config` (:class:`GatewayConfig`, from the
``MLRECIPE_GATEWAY`` environment variable (JSON) when vLLM instantiates the middleware itself), :mod:`.asgi`
(in-process calls of the engine). Standard library only.
"""

from __future__ import annotations

from mlrecipe.serve.gateway.config import CONFIG_VAR, GatewayConfig
from mlrecipe.serve.gateway.errors import openai_error
from mlrecipe.serve.gateway.kserve import translate_generate
from mlrecipe.serve.gateway.middleware import Gateway, wrap

__all__ = ["CONFIG_VAR", "Gateway", "GatewayConfig", "openai_error", "translate_generate", "wrap"]
