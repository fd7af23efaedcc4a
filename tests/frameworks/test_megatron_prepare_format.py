"""The files are Megatron's: megatron-core's own reader (``IndexedDataset``) reads what ``data/prepare.py`` wrote,
with the right sequence and document counts, every document decodes back to its source text, and the built-in
writer's bytes equal those of megatron-core's ``IndexedDatasetBuilder`` for the same tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrecipe_scripts.megatron.data.indexed import IndexedWriter, MegatronWriter
from tests.frameworks.megatron_data import Corpus, ShardServer, make_corpus, run_prepare

pytest.importorskip("zstandard")
pytest.importorskip("tokenizers")
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def indexed_dataset() -> Any:
    """megatron-core's indexed-dataset module (imported here: megatron.core takes seconds to import)."""
    return pytest.importorskip("megatron.core.datasets.indexed_dataset",
                               reason="megatron-core is not installed (the megatron extra)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return make_corpus(tmp_path_factory.mktemp("megatron-corpus"), shards=3)


def test_megatron_core_reads_every_document_back_and_both_writers_agree_byte_for_byte(
        corpus: Corpus, tmp_path: Path, indexed_dataset: Any) -> None:
    from tokenizers import Tokenizer

    with ShardServer(corpus.shards) as server:
        for writer in ("megatron", "builtin"):
            done = run_prepare("--source-url", server.url, "--file-numbers", "0-2", "--data-dir",
                               str(tmp_path / writer), "--tokenizer-dir", str(corpus.tokenizer), "--append-eod",
                               "--writer", writer, "--workers", "2", timeout=120)
            assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "megatron" / "manifest.json").read_text())
    assert {p["writer"] for p in manifest["prefixes"]} == {"megatron-core"}
    tok = Tokenizer.from_file(str(tmp_path / "megatron" / manifest["tokenizer"]["dir"] / "tokenizer.json"))
    eod = manifest["tokenizer"]["eod_id"]
    assert eod == tok.token_to_id("<|endoftext|>")
    for entry in manifest["prefixes"]:
        for suffix in (".bin", ".idx"):
            name = entry["prefix"] + suffix
            assert (tmp_path / "megatron" / name).read_bytes() == (tmp_path / "builtin" / name).read_bytes(), name
        dataset = indexed_dataset.IndexedDataset(str(tmp_path / "builtin" / entry["prefix"]))
        texts = corpus.texts(entry["file_number"])
        assert len(dataset) == entry["documents"] == len(texts)
        assert len(dataset.document_indices) == len(texts) + 1
        assert int(dataset.sequence_lengths.sum()) == entry["tokens"]
        for i, text in enumerate(texts):
            ids = dataset[i]
            assert ids.dtype == np.uint16 and int(ids[-1]) == eod
            assert tok.decode(ids[:-1].tolist(), skip_special_tokens=False) == text


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_both_writers_write_the_same_bytes(tmp_path: Path, dtype: type, indexed_dataset: Any) -> None:
    rng = np.random.default_rng(0)
    high = 65000 if dtype is np.uint16 else 150000
    docs = [rng.integers(0, high, size=n) for n in (1, 7, 300, 2, 4096)]
    for cls in (MegatronWriter, IndexedWriter):
        writer = cls(tmp_path / f"{cls.__name__}.bin", np.dtype(dtype))
        for doc in docs:
            writer.add_document(doc)
        writer.finalize(tmp_path / f"{cls.__name__}.idx")
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"MegatronWriter{suffix}").read_bytes() == (tmp_path / f"IndexedWriter{suffix}").read_bytes()
    dataset = indexed_dataset.IndexedDataset(str(tmp_path / "IndexedWriter"))
    assert [dataset[i].tolist() for i in range(len(docs))] == [d.tolist() for d in docs]
