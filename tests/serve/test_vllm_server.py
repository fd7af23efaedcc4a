"""A real vLLM server started by ``mlrecipe install`` on 127.0.0.1, queried with the official openai client.

One release serves the whole module (vLLM's CPU build starts in 20-50 s on 2 cores); the last test uninstalls
it and checks that no process is left behind.
"""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import openai
import pytest

from tests.integration.helpers import release_processes, release_tree, still_alive
from tests.serve.serving import Release, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def client(rel: Release, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=rel.url + "/v1", api_key=key or rel.key, max_retries=0, timeout=60)


def auth(rel: Release) -> dict[str, str]:
    return {"Authorization": f"Bearer {rel.key}"}


def test_install_reports_the_url_and_leaves_the_server_running(vllm_release: Release) -> None:
    assert "serving, ready after" in vllm_release.install_output
    assert vllm_release.url.startswith("http://127.0.0.1:")
    assert vllm_release.url in vllm_release.install_output
    assert httpx.get(vllm_release.url + "/health").status_code == 200  # the CLI has exited; the server has not
    status = json.loads(run_cli(vllm_release.home, "status", "llm", "-o", "json").stdout)[0]
    assert status["state"] == "serving"
    assert status["steps"][0]["state"] == "serving" and status["steps"][0]["url"] == vllm_release.url


def test_openai_client_models_completion_chat(vllm_release: Release) -> None:
    c = client(vllm_release)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    out = c.completions.create(model="tiny", prompt="The return statement", max_tokens=12, temperature=0,
                               extra_body={"min_tokens": 12})
    assert out.usage.completion_tokens == 12 and out.choices[0].text  # a 20-step model: maybe only spaces
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "What is a list?"}],
                                     max_tokens=8, temperature=0, extra_body={"min_tokens": 4})
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content


def test_streaming_completion_and_chat(vllm_release: Release) -> None:
    c = client(vllm_release)
    pieces = [ch.choices[0].text for ch in c.completions.create(
        model="tiny", prompt="A list", max_tokens=10, stream=True, extra_body={"min_tokens": 10}) if ch.choices]
    assert len(pieces) >= 5 and "".join(pieces).strip()
    deltas = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True,
        extra_body={"min_tokens": 6}) if ch.choices]
    assert "".join(deltas).strip()


def test_api_key_is_enforced_and_never_logged(vllm_release: Release) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(vllm_release, key="wrong").models.list()
    assert httpx.get(vllm_release.url + "/v1/models").status_code == 401
    assert httpx.get(vllm_release.url + "/health").status_code == 200
    logs = run_cli(vllm_release.home, "logs", "llm").stdout
    assert "Application startup complete" in logs
    assert vllm_release.key not in logs
    for path in vllm_release.home.rglob("*"):
        if path.is_file():
            assert vllm_release.key not in path.read_text(errors="replace"), path


BAD_BODIES = [
    ("/v1/completions", b'{"model": "tiny", "prompt": ', 400),  # malformed JSON
    ("/v1/completions", b"[1, 2]", 400),  # not an object
    ("/v1/completions", b'{"model": "tiny"}', 400),  # missing prompt
    ("/v1/completions", b'{"model": "tiny", "prompt": "a", "max_tokens": "ten"}', 400),  # wrong type
    ("/v1/completions", b'{"model": "tiny", "prompt": "a", "max_tokens": 100000}', 400),  # beyond the context
    ("/v1/completions", b'{"model": "gpt-9", "prompt": "a"}', 404),  # unknown model
    ("/v1/chat/completions", b'{"model": "tiny", "messages": "hi"}', 400),
    ("/v1/chat/completions", b'{"model": "tiny"}', 400),
]


@pytest.mark.parametrize("path,body,status", BAD_BODIES)
def test_bad_input_is_a_4xx_with_an_openai_error(vllm_release: Release, path: str, body: bytes, status: int) -> None:
    r = httpx.post(vllm_release.url + path, content=body,
                   headers={**auth(vllm_release), "Content-Type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"]


def test_bad_input_through_the_openai_client(vllm_release: Release) -> None:
    c = client(vllm_release)
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="nope", prompt="a", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match=r"max_model_len|context"):
        c.completions.create(model="tiny", prompt="a", max_tokens=10_000)
    assert httpx.get(vllm_release.url + "/health").status_code == 200


@pytest.mark.parametrize("chunked", [False, True])
def test_oversize_body_is_413(vllm_release: Release, chunked: bool) -> None:
    body = json.dumps({"model": "tiny", "prompt": "x " * 50_000}).encode()
    content = iter([body[i:i + 8192] for i in range(0, len(body), 8192)]) if chunked else body
    r = httpx.post(vllm_release.url + "/v1/completions", content=content,
                   headers={**auth(vllm_release), "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == 413


def test_overload_gets_429_with_retry_after_and_the_server_recovers(vllm_release: Release) -> None:
    body = {"model": "tiny", "prompt": "x", "max_tokens": 64, "min_tokens": 64}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=auth(vllm_release), timeout=120,
                                     limits=httpx.Limits(max_connections=64)) as ac:
            return await asyncio.gather(*(ac.post(vllm_release.url + "/v1/completions", json=body)
                                          for _ in range(24)))

    responses = asyncio.run(burst())
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 1 and codes.count(429) >= 8, codes
    for r in responses:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "rate_limit_error"
        else:
            assert r.json()["usage"]["completion_tokens"] == 64
    assert httpx.get(vllm_release.url + "/health").status_code == 200
    again = client(vllm_release).completions.create(model="tiny", prompt="x", max_tokens=4)
    assert again.usage.completion_tokens >= 1
    metrics = httpx.get(vllm_release.url + "/metrics").text
    assert 'mlrecipe_rejected_total{reason="overloaded"}' in metrics
    assert "mlrecipe_queue_depth 0" in metrics


def test_kserve_v2_and_triton_generate(vllm_release: Release) -> None:
    base, h = vllm_release.url, auth(vllm_release)
    assert httpx.get(base + "/v2/health/ready").json() == {"ready": True}
    assert httpx.get(base + "/v2/health/live").status_code == 200
    assert httpx.get(base + "/v2/models/tiny/ready", headers=h).status_code == 200
    r = httpx.post(base + "/v2/models/tiny/generate", headers=h, timeout=60,
                   json={"text_input": "The list", "parameters": {"max_tokens": 8, "min_tokens": 8, "temperature": 0}})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model_name"] == "tiny" and data["text_output"].startswith("The list")
    assert len(data["text_output"]) > len("The list")
    with httpx.stream("POST", base + "/v2/models/tiny/generate_stream", headers=h, timeout=60,
                      json={"text_input": "a", "parameters": {"max_tokens": 5, "min_tokens": 5}}) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    # vLLM holds back a token that ends inside a character and sends it with the next: at most one event a token.
    assert 1 <= len(events) <= 5 and all(e["model_name"] == "tiny" and "text_output" in e for e in events)
    assert events[0]["text_output"].startswith("a")  # the prompt, echoed once, first
    assert httpx.post(base + "/v2/models/nope/generate", headers=h, json={"text_input": "a"}).status_code == 404
    bad = httpx.post(base + "/v2/models/tiny/generate", headers=h, json={"parameters": {}})
    assert bad.status_code == 400 and "text_input" in bad.json()["error"]["message"]


def test_metrics(vllm_release: Release) -> None:
    client(vllm_release).completions.create(model="tiny", prompt="x", max_tokens=4)
    text = httpx.get(vllm_release.url + "/metrics").text
    for name in ("mlrecipe_requests_total", "mlrecipe_request_duration_seconds_bucket",
                 "mlrecipe_generated_tokens_total", "mlrecipe_generated_tokens_per_second", "mlrecipe_queue_depth",
                 "vllm:num_requests_waiting", "vllm:generation_tokens_total"):
        assert name in text, name
    assert 'mlrecipe_requests_total{route="/v1/completions",method="POST",status="200"}' in text


def test_engine_and_front_run_on_separate_cpus(vllm_release: Release) -> None:
    """vLLM's engine processes on all CPUs but the last, every API-server thread on the last (one CPU: shared)."""
    procs = release_processes("llm", vllm_release.home)
    api = next(p for p in procs if "vllm.entrypoints.openai.api_server" in p.cmdline())
    # vLLM renames its engine processes (setproctitle), which hides their environment: found as children
    engine = [p for p in api.children(recursive=True) if p.name().startswith(("VLLM::Engine", "VLLM::Worker"))]
    assert sorted(p.name()[:12] for p in engine) == ["VLLM::Engine", "VLLM::Worker"]
    usable = sorted(os.sched_getaffinity(0))
    front_masks = {tuple(sorted(os.sched_getaffinity(t.id))) for t in api.threads()}
    if len(usable) < 2:
        assert front_masks == {tuple(usable)}
        return
    assert front_masks == {tuple(usable[-1:])}
    assert [p.cpu_affinity() for p in engine] == [usable[:-1]] * 2
    logs = run_cli(vllm_release.home, "logs", "llm").stdout
    assert f"engine on CPUs {','.join(map(str, usable[:-1]))}, HTTP front on CPU {usable[-1]}" in logs


def test_uninstall_leaves_no_process(vllm_release: Release) -> None:
    tree = release_tree("llm", vllm_release.home)
    assert any(p.name().startswith("VLLM::Engine") for p in tree), "the server should be running"
    result = run_cli(vllm_release.home, "uninstall", "llm")
    assert result.returncode == 0, result.stderr
    assert release_processes("llm", vllm_release.home) == []
    assert still_alive(tree) == []
    with pytest.raises(httpx.TransportError):
        httpx.get(vllm_release.url + "/health", timeout=2)
