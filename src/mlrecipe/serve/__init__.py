"""Local inference serving: vLLM's own OpenAI server (or a small transformers engine) plus a thin gateway.

``python -m mlrecipe.serve --engine vllm --model DIR`` runs ``vllm.entrypoints.openai.api_server`` with
:class:`mlrecipe.serve.gateway.Gateway` installed through vLLM's ``--middleware`` hook: the OpenAI routes
are vLLM's, unchanged (streaming included), in the same process (no extra hop). The gateway adds only what
vLLM does not do: the KServe v2 / Triton ``generate`` routes, a request body limit (413), a bounded number
of requests in flight (429 with ``Retry-After``), API-key enforcement that never logs the key, and extra
Prometheus metrics appended to vLLM's ``/metrics``.

``--engine transformers`` serves the same API with a naive, sequential ``transformers`` engine
(:mod:`mlrecipe.serve.hf_engine`): the benchmark baseline, and an embeddings fallback for encoder models
vLLM's CPU build cannot run. ``python -m mlrecipe.serve.rayserve`` runs a Ray Serve config (the rayserve
chart) with :mod:`mlrecipe.serve.ray_openai` as the vLLM deployment.

Everything here runs in the serving environment (``make serve-env`` -> ``.venv-vllm``); the gateway itself
uses the standard library only.
"""
