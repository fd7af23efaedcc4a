"""A naive transformers engine behind the same OpenAI API: sequential generation, one request at a time.

It is the benchmark's baseline (what serving without vLLM looks like) and a fallback for encoder models
(``/v1/embeddings``, mean-pooled and L2-normalised) that vLLM's CPU build cannot run (its CPU attention
supports some head sizes only; vLLM serves BERT-style embeddings, classification, rerank and score
otherwise, see tests/serve/test_vllm_encoders.py). Routes: ``/health``,
``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (both with ``stream``), ``/v1/embeddings``;
the gateway in front adds the KServe v2 routes, limits, the API key and ``/metrics``.
Runs in the serving environment (Starlette and uvicorn come with vLLM).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

from mlrecipe.serve.gateway import Gateway, GatewayConfig, openai_error

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from mlrecipe.serve.placement import CpuPlacement


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


@overload
def _int(body: dict[str, Any], key: str, default: int, lo: int = 0) -> int: ...
@overload
def _int(body: dict[str, Any], key: str, default: None, lo: int = 0) -> int | None: ...
def _int(body: dict[str, Any], key: str, default: int | None, lo: int = 0) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"'{key}' must be an integer", key)
    if value < lo:
        raise RequestError(400, f"'{key}' must be >= {lo}", key)
    return value


def _float(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(400, f"'{key}' must be a number", key)
    if not lo <= value <= hi:
        raise RequestError(400, f"'{key}' must be between {lo} and {hi}", key)
    return float(value)


class Engine:
    """One model, generated from sequentially on one worker thread."""

    def __init__(self, model_dir: str, name: str, chat_template: str | None,
                 placement: CpuPlacement | None = None) -> None:
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.name = name
        config = AutoConfig.from_pretrained(model_dir)
        self.causal = any(a.endswith("ForCausalLM") for a in config.architectures or [])
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        cls = AutoModelForCausalLM if self.causal else AutoModel
        use_cuda = torch.cuda.is_available() and os.environ.get("MLRECIPE_DEVICE") != "cpu"
        self.device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
        self.model = cls.from_pretrained(model_dir).eval().to(self.device)
        self.context = int(getattr(config, "max_position_embeddings", 2048))
        self.eos = self.tokenizer.eos_token_id
        if chat_template:
            self.tokenizer.chat_template = Path(chat_template).read_text(encoding="utf-8")
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine",
                                       initializer=placement.pin_this_thread_to_engine if placement else None)
        self.created = int(time.time())

    # -- generation (worker thread) --------------------------------------------------------------------
    def generate(self, ids: list[int], p: dict[str, Any], on_text: Callable[[str], None] | None = None,
                 cancel: threading.Event | None = None) -> tuple[str, int, str]:
        torch = self.torch
        gen = torch.Generator(self.device).manual_seed(p["seed"]) if p["seed"] is not None else None
        past, out_ids, text, finish = None, [], "", "length"
        inputs = torch.tensor([ids], device=self.device)
        with torch.inference_mode():
            for _ in range(p["max_tokens"]):
                if cancel is not None and cancel.is_set():
                    finish = "abort"
                    break
                result = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = result.past_key_values
                logits = result.logits[0, -1].float()
                if p["ignore_eos"] and self.eos is not None:
                    logits[self.eos] = -float("inf")
                if p["temperature"] <= 0:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / p["temperature"], dim=-1)
                    if p["top_p"] < 1.0:
                        sorted_p, order = torch.sort(probs, descending=True)
                        keep = torch.cumsum(sorted_p, 0) - sorted_p < p["top_p"]
                        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
                    token = int(torch.multinomial(probs, 1, generator=gen))
                if token == self.eos and not p["ignore_eos"]:
                    finish = "stop"
                    break
                out_ids.append(token)
                new_text = cast(str, self.tokenizer.decode(out_ids, skip_special_tokens=True))  # one sequence: one text
                delta, text = new_text[len(text):], new_text
                stop_at = min((text.find(s) for s in p["stop"] if s and s in text), default=-1)
                if stop_at >= 0:
                    delta = delta[: max(0, len(delta) - (len(text) - stop_at))]
                    text = text[:stop_at]
                    if on_text and delta:
                        on_text(delta)
                    finish = "stop"
                    break
                if on_text and delta:
                    on_text(delta)
                inputs = torch.tensor([[token]], device=self.device)
        return text, len(out_ids), finish

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        torch = self.torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.context, return_tensors="pt")
        batch = batch.to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled.tolist(), int(batch["attention_mask"].sum())

    # -- request parsing -----------------------------------------------------------------------------
    def sampling(self, body: dict[str, Any], n_prompt: int) -> dict[str, Any]:
        n = _int(body, "n", 1, 1)
        if n != 1:
            raise RequestError(400, "only n=1 is supported by this engine", "n")
        default_max = max(1, min(16, self.context - n_prompt))
        key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = _int(body, key, default_max, 1)
        if n_prompt + max_tokens > self.context:
            raise RequestError(400, f"This model's maximum context length is {self.context} tokens. However, you "
                                    f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the prompt, "
                                    f"{max_tokens} for the completion).", key)
        stop = body.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise RequestError(400, "'stop' must be a string or a list of strings", "stop")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError(400, "'stream' must be a boolean", "stream")
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise RequestError(400, "'ignore_eos' must be a boolean", "ignore_eos")
        return {"max_tokens": max_tokens, "temperature": _float(body, "temperature", 1.0, 0.0, 2.0),
                "top_p": _float(body, "top_p", 1.0, 0.0, 1.0), "seed": _int(body, "seed", None),
                "stop": stop, "stream": stream, "ignore_eos": ignore_eos}

    def check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if not isinstance(model, str):
            raise RequestError(400, "'model' is required and must be a string", "model")
        if model != self.name:
            raise RequestError(404, f"The model `{model}` does not exist.", "model")

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])


def error_response(exc: RequestError) -> JSONResponse:
    """``exc`` as vLLM answers it: the gateway's OpenAI error body with vLLM's error types."""
    from starlette.responses import JSONResponse

    kind = "NotFoundError" if exc.status == 404 else "BadRequestError"
    return JSONResponse(openai_error(exc.status, exc.message, kind, exc.param), status_code=exc.status)


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object; RequestError when it is not one."""
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    return body


def answers_request_errors(
    handler: Callable[[OpenAIRoutes, Request], Awaitable[Response]],
) -> Callable[[OpenAIRoutes, Request], Awaitable[Response]]:
    """A route whose :class:`RequestError` is answered as an OpenAI error."""

    @functools.wraps(handler)
    async def route(self: OpenAIRoutes, request: Request) -> Response:
        try:
            return await handler(self, request)
        except RequestError as exc:
            return error_response(exc)

    return route


@dataclass(frozen=True)
class CompletionReply:
    """What every chunk of one completion response repeats: its id, object type, creation time and model."""

    id: str
    object: str
    created: int
    model: str
    chat: bool

    @classmethod
    def new(cls, model: str, chat: bool) -> CompletionReply:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        return cls(rid, "chat.completion" if chat else "text_completion", int(time.time()), model, chat)

    def whole(self, text: str, finish: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """The non-streamed response."""
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                  if self.chat else {"index": 0, "text": text, "finish_reason": finish, "logprobs": None})
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                               "total_tokens": prompt_tokens + completion_tokens}}

    def role_event(self) -> bytes:
        """A chat stream's first event: the assistant role, no content yet."""
        first = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        return b"data: " + json.dumps(first).encode() + b"\n\n"

    def event(self, delta: str | None, finish: str | None) -> bytes:
        """One server-sent event: a text ``delta``, or the end (``finish``)."""
        if self.chat:
            choice = {"index": 0, "delta": {} if delta is None else {"content": delta}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta or "", "finish_reason": finish}
        data = {"id": self.id, "object": self.object + ".chunk" if self.chat else self.object,
                "created": self.created, "model": self.model, "choices": [choice]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"


class StreamedGeneration:
    """A generation started at once on the engine's thread; its text deltas are read as they come."""

    def __init__(self, engine: Engine, ids: list[int], params: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.cancel = threading.Event()

        def on_text(delta: str) -> None:
            loop.call_soon_threadsafe(self.queue.put_nowait, delta)

        self.future = loop.run_in_executor(engine.pool, engine.generate, ids, params, on_text, self.cancel)
        self.future.add_done_callback(lambda _f: loop.call_soon_threadsafe(self.queue.put_nowait, None))

    async def events(self, reply: CompletionReply) -> AsyncIterator[bytes]:
        """The response's server-sent events; the generation stops when the client goes away."""
        try:
            if reply.chat:
                yield reply.role_event()
            while (delta := await self.queue.get()) is not None:
                yield reply.event(delta, None)
            _text, _n, finish = await self.future
            yield reply.event(None, finish)
            yield b"data: [DONE]\n\n"
        finally:
            self.cancel.set()


class OpenAIRoutes:
    """The engine's OpenAI routes, one method each (Starlette endpoints)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def health(self, _request: Request) -> Response:
        from starlette.responses import Response

        return Response(status_code=200)

    async def models(self, _request: Request) -> JSONResponse:
        from starlette.responses import JSONResponse

        engine = self.engine
        return JSONResponse({"object": "list", "data": [
            {"id": engine.name, "object": "model", "created": engine.created, "owned_by": "mlrecipe",
             "max_model_len": engine.context}]})

    @answers_request_errors
    async def completions(self, request: Request) -> Response:
        body = await json_body(request)
        self.require_generative(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise RequestError(400, "'prompt' is required and must be a string", "prompt")
        return await self.generate(prompt, body, chat=False)

    @answers_request_errors
    async def chat_completions(self, request: Request) -> Response:
        body = await json_body(request)
        self.require_generative(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise RequestError(400, "'messages' must be a non-empty list of {role, content} strings", "messages")
        tokenizer = self.engine.tokenizer
        if not tokenizer.chat_template:
            raise RequestError(400, "this model has no chat template (serve it with --chat-template FILE)")
        prompt = cast(str, tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                         tokenize=False))  # not tokenized: text
        return await self.generate(prompt, body, chat=True)

    @answers_request_errors
    async def embeddings(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        engine = self.engine
        body = await json_body(request)
        engine.check_model(body)
        if engine.causal:
            raise RequestError(400, "this model is generative: use /v1/completions")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise RequestError(400, "'input' must be a string or a non-empty list of strings", "input")
        vectors, n = await asyncio.get_running_loop().run_in_executor(engine.pool, engine.embed, texts)
        return JSONResponse({"object": "list", "model": engine.name, "usage": {"prompt_tokens": n, "total_tokens": n},
                             "data": [{"object": "embedding", "index": i, "embedding": v}
                                      for i, v in enumerate(vectors)]})

    def require_generative(self, body: dict[str, Any]) -> None:
        """The request names this model, and the model generates text."""
        self.engine.check_model(body)
        if not self.engine.causal:
            raise RequestError(400, "this model is an encoder: use /v1/embeddings")

    async def generate(self, prompt: str, body: dict[str, Any], chat: bool) -> Response:
        """Generate from ``prompt`` with the body's sampling: one response, or server-sent events (``stream``)."""
        from starlette.responses import JSONResponse, StreamingResponse

        engine = self.engine
        ids = engine.encode(prompt)
        params = engine.sampling(body, len(ids))
        reply = CompletionReply.new(engine.name, chat)
        if params["stream"]:
            return StreamingResponse(StreamedGeneration(engine, ids, params).events(reply),
                                     media_type="text/event-stream")
        loop = asyncio.get_running_loop()
        text, n, finish = await loop.run_in_executor(engine.pool, engine.generate, ids, params)
        return JSONResponse(reply.whole(text, finish, len(ids), n))


def build_app(engine: Engine) -> Starlette:
    """The Starlette app serving ``engine`` on the OpenAI routes (``/health``, ``/v1/models``,
    ``/v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``)."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    routes = OpenAIRoutes(engine)
    return Starlette(routes=[
        Route("/health", routes.health, methods=["GET"]),
        Route("/v1/models", routes.models, methods=["GET"]),
        Route("/v1/completions", routes.completions, methods=["POST"]),
        Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
        Route("/v1/embeddings", routes.embeddings, methods=["POST"]),
    ])


def run(args: argparse.Namespace, config: GatewayConfig, placement: CpuPlacement | None = None) -> int:
    """Serve ``args.model``; with a ``placement``, load and generate on its engine CPUs, serve HTTP on its front."""
    import uvicorn

    name = args.served_model_name or args.model
    print(f"mlrecipe.serve: loading {args.model} with transformers (sequential engine)", flush=True)
    if placement:
        placement.pin_this_thread_to_engine()
    engine = Engine(args.model, name, args.chat_template, placement)
    kind = "causal LM" if engine.causal else "encoder (embeddings)"
    print(f"mlrecipe.serve: {kind} '{name}', context {engine.context}; listening on http://{args.host}:{args.port}",
          flush=True)
    if placement:
        placement.pin_this_thread_to_front()
    uvicorn.run(Gateway(build_app(engine), config), host=args.host, port=args.port, log_level="info")
    return 0
