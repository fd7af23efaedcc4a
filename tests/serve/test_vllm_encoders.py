"""Encoder models through vLLM's CPU build behind the gateway: embeddings, classification, rerank and score.

Tiny BERT models built from configs with a word-piece vocabulary written here (no hub). vLLM's CPU attention
needs a supported head size, hence one 64-wide head. Two servers: a bare encoder (embeddings) and a one-label
cross-encoder, which vLLM serves for classification, rerank and score alike (a vLLM start is most of this file's time).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.serve.serving import SERVE_ENV, has_serve_env, start_server, stop_server

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not has_serve_env(), reason=f"no serving environment with vLLM at {SERVE_ENV} "
                                                            "(run 'make serve-env')")]
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "list", "is", "of", "items", "python", "code"]


def bert(root: Path, labels: int | None) -> Path:
    """A 2-layer BERT: a bare encoder (``labels=None``) or a sequence classifier with ``labels`` outputs."""
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

    (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    model_dir = root / "model"
    BertTokenizerFast(vocab_file=str(root / "vocab.txt")).save_pretrained(model_dir)
    extra = {} if labels is None else {"num_labels": labels, "id2label": {i: f"label{i}" for i in range(labels)},
                                       "label2id": {f"label{i}": i for i in range(labels)}}
    config = BertConfig(vocab_size=len(WORDS), hidden_size=64, num_hidden_layers=2, num_attention_heads=1,
                        intermediate_size=128, max_position_embeddings=64, **extra)
    (BertModel if labels is None else BertForSequenceClassification)(config).save_pretrained(model_dir)
    return model_dir


def served(root: Path, name: str, labels: int | None) -> Iterator[str]:
    proc, url = start_server(bert(root, labels), name, root / "server.log", "vllm")
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from served(tmp_path_factory.mktemp("bert-embed"), "bert", None)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from served(tmp_path_factory.mktemp("bert-rerank"), "rerank", 1)


def test_embeddings(embedder: str) -> None:
    client = openai.OpenAI(base_url=embedder + "/v1", api_key="unused", max_retries=0)
    out = client.embeddings.create(model="bert", input=["the list is fast", "python code"])
    assert len(out.data) == 2 and len(out.data[0].embedding) == 64
    assert out.data[0].embedding != out.data[1].embedding
    assert out.usage.prompt_tokens > 0
    bad = httpx.post(embedder + "/v1/embeddings", json={"model": "bert"})
    assert bad.status_code == 400 and bad.json()["error"]["message"]


def test_classification(cross_encoder: str) -> None:
    r = httpx.post(cross_encoder + "/classify", json={"model": "rerank", "input": ["the list is fast", "python code"]})
    assert r.status_code == 200, r.text
    rows = r.json()["data"]
    assert len(rows) == 2 and all(row["num_classes"] == 1 and row["label"] == "label0" for row in rows), rows
    assert all(len(row["probs"]) == 1 for row in rows)


def test_rerank_and_score(cross_encoder: str) -> None:
    r = httpx.post(cross_encoder + "/v1/rerank",
                   json={"model": "rerank", "query": "python", "documents": ["the list", "python code"]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert sorted(x["index"] for x in results) == [0, 1] and all(0 <= x["relevance_score"] <= 1 for x in results)
    s = httpx.post(cross_encoder + "/v1/score", json={"model": "rerank", "text_1": "python",
                                                      "text_2": ["the list", "python code"]})
    assert s.status_code == 200 and len(s.json()["data"]) == 2
