"""The gateway as an ASGI middleware around a fake engine: limits, API key, KServe v2 translation, metrics."""

from __future__ import annotations

import asyncio
import json

import pytest

from mlrecipe.serve.gateway import Gateway, GatewayConfig, translate_generate


class FakeEngine:
    """An OpenAI-ish ASGI app: /health, /v1/models, /v1/completions (optionally slow, optionally streaming)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.seen: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        path = scope["path"]
        if path == "/health":
            await self._json(send, 200, {})
        elif path == "/metrics":
            await self._text(send, "engine_metric 1\n")
        elif path == "/v1/models":
            await self._json(send, 200, {"data": [{"id": "tiny"}]})
        elif path == "/v1/completions":
            request = json.loads(body)
            self.seen.append(request)
            await asyncio.sleep(self.delay)
            if request.get("model") != "tiny":
                await self._json(send, 404, {"error": {"message": "The model does not exist.", "code": 404}})
            elif request.get("stream"):
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"text/event-stream")]})
                for word in ("a", "b"):
                    chunk = json.dumps({"choices": [{"text": word}]})
                    await send({"type": "http.response.body", "body": f"data: {chunk}\n\n".encode(),
                                "more_body": True})
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            else:
                await self._json(send, 200, {"choices": [{"text": " world"}], "usage": {"completion_tokens": 1}})
        else:
            await self._json(send, 404, {"detail": "Not Found"})

    @staticmethod
    async def _json(send, status: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": raw, "more_body": False})

    @staticmethod
    async def _text(send, text: str) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": text.encode(), "more_body": False})


async def request(app, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                  chunked: bool = False) -> tuple[int, dict, bytes]:
    hdrs = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body is not None and not chunked:
        hdrs.append((b"content-length", str(len(body)).encode()))
    parts = [body[i:i + 100] for i in range(0, len(body), 100)] if body else [b""]
    queue = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    out: dict = {"body": b""}

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)

    async def send(msg):
        if msg["type"] == "http.response.start":
            out["status"] = msg["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in msg.get("headers", [])}
        else:
            out["body"] += msg.get("body", b"")

    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": hdrs}
    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]


def run(coro):
    return asyncio.run(coro)


def test_api_key_enforced_except_health_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEY", "s3cret")
    app = Gateway(FakeEngine(), GatewayConfig(api_key_env="TEST_KEY"))
    assert "s3cret" not in repr(app)
    status, _headers, body = run(request(app, "GET", "/v1/models"))
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    assert "s3cret" not in body.decode()
    assert run(request(app, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"}))[0] == 401
    assert run(request(app, "GET", "/v1/models", headers={"Authorization": "Bearer s3cret"}))[0] == 200
    assert run(request(app, "GET", "/health"))[0] == 200
    assert run(request(app, "GET", "/v2/health/ready"))[0] == 200
    assert run(request(app, "GET", "/metrics"))[0] == 200


def test_api_key_from_file(tmp_path) -> None:
    key = tmp_path / "key"
    key.write_text("from-file\n")
    app = Gateway(FakeEngine(), GatewayConfig(api_key_file=str(key)))
    assert run(request(app, "GET", "/v1/models", headers={"Authorization": "Bearer from-file"}))[0] == 200
    assert run(request(app, "GET", "/v1/models"))[0] == 401


@pytest.mark.parametrize("chunked", [False, True])
def test_oversize_body_is_413(chunked: bool) -> None:
    engine = FakeEngine()
    app = Gateway(engine, GatewayConfig(max_body_bytes=1000))
    big = json.dumps({"model": "tiny", "prompt": "x" * 5000}).encode()
    status, _, body = run(request(app, "POST", "/v1/completions", big, chunked=chunked))
    assert status == 413 and json.loads(body)["error"]["code"] == 413
    assert engine.seen == []
    small = json.dumps({"model": "tiny", "prompt": "x"}).encode()
    assert run(request(app, "POST", "/v1/completions", small, chunked=chunked))[0] == 200


def test_bounded_inflight_429_with_retry_after_then_recovers() -> None:
    app = Gateway(FakeEngine(delay=0.3), GatewayConfig(max_inflight=2, retry_after_s=3))
    body = json.dumps({"model": "tiny", "prompt": "x"}).encode()

    async def burst():
        return await asyncio.gather(*(request(app, "POST", "/v1/completions", body) for _ in range(6)))

    results = run(burst())
    statuses = sorted(r[0] for r in results)
    assert statuses == [200, 200, 429, 429, 429, 429]
    rejected = [r for r in results if r[0] == 429]
    assert all(r[1]["retry-after"] == "3" for r in rejected)
    assert json.loads(rejected[0][2])["error"]["type"] == "rate_limit_error"
    assert app.metrics.inflight == 0
    assert run(request(app, "POST", "/v1/completions", body))[0] == 200
    metrics = run(request(app, "GET", "/metrics"))[2].decode()
    assert "engine_metric 1" in metrics
    assert 'mlrecipe_rejected_total{reason="overloaded"} 4' in metrics
    assert 'mlrecipe_requests_total{route="/v1/completions",method="POST",status="429"} 4' in metrics
    assert "mlrecipe_queue_depth 0" in metrics
    assert "mlrecipe_generated_tokens_total 3" in metrics


def test_v2_generate_translates_to_completions() -> None:
    engine = FakeEngine()
    app = Gateway(engine)
    body = json.dumps({"text_input": "hello", "parameters": {"max_tokens": 5, "temperature": 0}}).encode()
    status, _, raw = run(request(app, "POST", "/v2/models/tiny/generate", body))
    assert status == 200
    assert json.loads(raw) == {"model_name": "tiny", "model_version": "1", "text_output": "hello world"}
    assert engine.seen[-1] == {"model": "tiny", "prompt": "hello", "max_tokens": 5, "temperature": 0.0}
    body = json.dumps({"text_input": "hello", "parameters": {"exclude_input_in_output": True}}).encode()
    assert json.loads(run(request(app, "POST", "/v2/models/tiny/generate", body))[2])["text_output"] == " world"
    status, headers, raw = run(request(app, "POST", "/v2/models/tiny/generate_stream", body))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert [e["text_output"] for e in events] == ["a", "b"]
    status, _, raw = run(request(app, "POST", "/v2/models/nope/generate", body))
    assert status == 404 and "does not exist" in json.loads(raw)["error"]["message"]


def test_v2_get_routes() -> None:
    app = Gateway(FakeEngine())
    assert run(request(app, "GET", "/v2/health/live"))[0] == 200
    assert json.loads(run(request(app, "GET", "/v2/health/ready"))[2]) == {"ready": True}
    assert run(request(app, "GET", "/v2/models/tiny/ready"))[0] == 200
    assert run(request(app, "GET", "/v2/models/nope/ready"))[0] == 404
    assert json.loads(run(request(app, "GET", "/v2/models/tiny"))[2])["inputs"][0]["name"] == "text_input"


@pytest.mark.parametrize("raw,message", [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"parameters": {}}', "'text_input' is required"),
    (b'{"text_input": 5}', "'text_input' is required"),
    (b'{"text_input": "x", "parameters": 3}', "'parameters' must be an object"),
    (b'{"text_input": "x", "parameters": {"max_tokens": "many"}}', "'max_tokens' must be a number"),
    (b'{"text_input": "x", "parameters": {"max_tokens": true}}', "'max_tokens' must be a number"),
    (b'{"text_input": "x", "parameters": {"stop": [1]}}', "'stop' must be a string"),
    (b'{"text_input": "x", "sampling_parameters": "{bad"}', "sampling_parameters"),
])
def test_translate_generate_rejects_bad_bodies(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        translate_generate("m", raw, False)
    status, _, body = run(request(Gateway(FakeEngine()), "POST", "/v2/models/tiny/generate", raw))
    assert status == 400 and message.strip("'") .split("'")[0] in json.loads(body)["error"]["message"]


def test_translate_generate_accepts_triton_forms() -> None:
    out = translate_generate("m", b'{"text_input": ["hi"], "sampling_parameters": "{\\"max_new_tokens\\": 7}"}', True)
    assert out["max_tokens"] == 7 and out["stream"] is True and out["prompt"] == "hi"
    out = translate_generate("m", b'{"text_input": "hi", "max_tokens": 3, "temperature": "0.5"}', False)
    assert out["max_tokens"] == 3 and out["temperature"] == 0.5 and "stream" not in out


def test_tokens_per_second_keeps_only_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that is never scraped does not accumulate: the window is trimmed as tokens arrive."""
    from mlrecipe.serve.gateway import metrics as gateway_metrics

    clock = [100.0]
    monkeypatch.setattr(gateway_metrics.time, "monotonic", lambda: clock[0])
    metrics = gateway_metrics.Metrics(window_s=10.0)
    for _ in range(1000):
        metrics.add_tokens(5)
        clock[0] += 0.1
    assert len(metrics._recent) <= 101
    assert metrics.tokens_per_second() == pytest.approx(5 * 100 / 10, rel=0.02)
    assert metrics.tokens_total == 5000


def test_every_error_has_the_one_openai_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """401, 413 and 429 on the OpenAI routes and 400/404 on the v2 routes (an engine's error included) all answer
    {"error": {"message", "type", "param", "code"}} with the status as the code."""
    monkeypatch.setenv("TEST_KEY", "k")
    auth = {"Authorization": "Bearer k"}
    keyed = Gateway(FakeEngine(), GatewayConfig(api_key_env="TEST_KEY", max_body_bytes=200, max_inflight=0))
    small = json.dumps({"model": "tiny", "prompt": "x"}).encode()
    v2 = json.dumps({"text_input": "x"}).encode()
    answers = [
        run(request(keyed, "GET", "/v1/models")),
        run(request(keyed, "POST", "/v1/completions", b"x" * 500, headers=auth)),
        run(request(keyed, "POST", "/v1/completions", small, headers=auth)),
    ]
    app = Gateway(FakeEngine())
    answers += [
        run(request(app, "POST", "/v2/models/tiny/generate", b"{bad")),
        run(request(app, "POST", "/v2/models/nope/generate", v2)),
        run(request(app, "GET", "/v2/models/nope")),
        run(request(app, "GET", "/v2/nowhere")),
        run(request(app, "POST", "/v2/models/tiny/nowhere", v2)),
    ]
    assert [status for status, _, _ in answers] == [401, 413, 429, 400, 404, 404, 404, 404]
    for status, headers, body in answers:
        error = json.loads(body)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["code"] == status, body
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)
        assert headers["content-type"] == "application/json"
