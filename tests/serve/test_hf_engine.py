"""The transformers engine (the benchmark's naive baseline; also encoder embeddings) behind the same API and gateway."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import openai
import psutil
import pytest

from tests.repo import EXAMPLES
from tests.serve.serving import SERVE_ENV, has_serve_env, start_server, stop_server

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not has_serve_env("starlette"),
                                 reason=f"no serving environment at {SERVE_ENV} (run 'make serve-env')")]


def start(model: Path, name: str, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    return start_server(model, name, log, "transformers", *extra)


class Server(NamedTuple):
    proc: subprocess.Popen
    url: str


@pytest.fixture(scope="module")
def causal_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("hf") / "server.log"
    server = Server(*start(tiny_model, "tiny", log, "--chat-template",
                           str(EXAMPLES / "quickstart" / "chat_template.jinja")))
    yield server
    stop_server(server.proc)


@pytest.fixture(scope="module")
def causal(causal_server: Server) -> str:
    return causal_server.url


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tiny BERT built from a config with a word-piece vocabulary written here (no hub)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("bert")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "list", "is", "of", "items", "python", "code"]
    (root / "vocab.txt").write_text("\n".join(words) + "\n")
    BertTokenizerFast(vocab_file=str(root / "vocab.txt")).save_pretrained(root / "model")
    config = BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(root / "model")
    proc, url = start(root / "model", "bert", root / "server.log")
    yield url
    stop_server(proc)


def test_completion_chat_and_streaming(causal: str) -> None:
    c = openai.OpenAI(base_url=causal + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    out = c.completions.create(model="tiny", prompt="The list", max_tokens=8, temperature=0,
                               extra_body={"ignore_eos": True})
    assert out.usage.completion_tokens == 8 and out.choices[0].text
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                     extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content
    pieces = [ch.choices[0].text for ch in c.completions.create(model="tiny", prompt="a", max_tokens=6, stream=True,
                                                                 extra_body={"ignore_eos": True})]
    assert "".join(pieces)
    r = httpx.post(causal + "/v2/models/tiny/generate", json={"text_input": "a", "parameters": {"max_tokens": 3}})
    assert r.status_code == 200 and r.json()["text_output"].startswith("a")


@pytest.mark.parametrize("body,status", [
    (b'{"model": "tiny", "prompt": ', 400),
    (b'{"model": "tiny"}', 400),
    (b'{"model": "tiny", "prompt": "a", "max_tokens": "x"}', 400),
    (b'{"model": "tiny", "prompt": "a", "max_tokens": 100000}', 400),
    (b'{"model": "other", "prompt": "a"}', 404),
])
def test_bad_input(causal: str, body: bytes, status: int) -> None:
    r = httpx.post(causal + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status and r.json()["error"]["message"]


def test_embeddings_of_an_encoder(encoder: str) -> None:
    c = openai.OpenAI(base_url=encoder + "/v1", api_key="unused", max_retries=0)
    out = c.embeddings.create(model="bert", input=["the list is fast", "python code"])
    assert len(out.data) == 2 and len(out.data[0].embedding) == 32
    norm = sum(x * x for x in out.data[0].embedding) ** 0.5
    assert abs(norm - 1.0) < 1e-3
    assert out.data[0].embedding != out.data[1].embedding
    r = httpx.post(encoder + "/v1/completions", json={"model": "bert", "prompt": "a"})
    assert r.status_code == 400 and "encoder" in r.json()["error"]["message"]


def test_generation_and_front_threads_are_placed(causal_server: Server) -> None:
    """The event loop on the last CPU, generation on the others (mlrecipe.serve.placement); all CPUs with one."""
    r = httpx.post(causal_server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
    assert r.status_code == 200, r.text
    usable = sorted(os.sched_getaffinity(0))
    server = psutil.Process(causal_server.proc.pid)
    masks = {t.id: sorted(os.sched_getaffinity(t.id)) for t in server.threads()}
    if len(usable) < 2:
        assert set(map(tuple, masks.values())) == {tuple(usable)}
        return
    assert masks[server.pid] == usable[-1:]
    assert usable[:-1] in masks.values(), masks
