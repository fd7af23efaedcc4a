"""``data/prepare.py`` against Megatron-LM's own ``tools/preprocess_data.py`` (issue 39, point 1), byte for byte.

Upstream's script is on GitHub only: neither the megatron-core wheel nor its sdist ships ``tools/``. The test that runs
it needs ``MEGATRON_LM_DIR``, a checkout of the tag of the megatron-core version this environment has
(``core_v0.16.1``), and skips without it (``make megatron-upstream-check MEGATRON_LM_DIR=...`` runs it; CI has no
checkout). It runs upstream single-process (``--workers 1 --append-eod``) and the chart tree's ``data/prepare.py`` as
2 ranks cutting the same file into byte ranges, for both tokenizer forms the two take with one meaning (GPT-2 BPE
files; a Hugging Face tokenizer folder), on a Pile-shaped file with the documents whose rules differ between tools:
an empty text (upstream: a document without a sequence and without the end-of-document token), blank-looking texts,
a literal ``<|endoftext|>``, non-ASCII text, a CRLF line, no newline at the end.

The first tests run everywhere (no upstream checkout, no process): documents without tokens through both writers and
the parallel merge give megatron-core's ``IndexedDatasetBuilder`` bytes, fed as upstream's script feeds it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrecipe_scripts.megatron.data import merge
from mlrecipe_scripts.megatron.data.indexed import IndexedWriter, MegatronWriter, PartWriter, read_index
from tests.frameworks.megatron_data import Corpus, clean_env, make_corpus, prepare_command

pytest.importorskip("zstandard")
pytest.importorskip("tokenizers")

#: Documents added to the corpus's: each one a rule where tools could differ.
EDGE_TEXTS = ("", "   ", "\n\n", "before<|endoftext|>after", "emoji \U0001f600 CJK \u6f22\u5b57 e\u0301",
              "line\u2028separator", "tabs\tand\r\nCRLF inside", "", "<|endoftext|>", "x" * 3000, "last")
TOKENIZER_FORMS = ("gpt2-bpe-files", "huggingface-folder")


def _upstream_builder(docs: list[np.ndarray], prefix: Path, dtype: type) -> tuple[bytes, bytes]:
    """megatron-core's builder fed as upstream's ``Encoder.encode`` feeds it: a document without tokens has no
    sequence (``add_document([], [])``)."""
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        builder.add_document(doc, [len(doc)] if len(doc) else [])
    builder.finalize(f"{prefix}.idx")
    return Path(f"{prefix}.bin").read_bytes(), Path(f"{prefix}.idx").read_bytes()


def _docs_with_empty_ones(dtype: type) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=int(n)).astype(dtype) for n in rng.integers(1, 300, size=60)]
    for at in (0, 1, 17, 18, 19, 40, 59):  # first, consecutive, last
        docs[at] = np.empty(0, dtype)
    return [*docs, np.empty(0, dtype)]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_documents_without_tokens_are_written_as_upstream_writes_them_by_both_writers(tmp_path: Path,
                                                                                     dtype: type) -> None:
    docs = _docs_with_empty_ones(dtype)
    expected = _upstream_builder(docs, tmp_path / "upstream", dtype)
    for cls in (IndexedWriter, MegatronWriter):
        writer = cls(tmp_path / f"{cls.__name__}.bin", np.dtype(dtype))
        for doc in docs:
            writer.add_document(doc)
        writer.finalize(tmp_path / f"{cls.__name__}.idx")
        got = ((tmp_path / f"{cls.__name__}.bin").read_bytes(), (tmp_path / f"{cls.__name__}.idx").read_bytes())
        assert got == expected, cls.__name__
    index = read_index(tmp_path / "IndexedWriter.idx")
    assert (len(index.lengths), len(index.document_indices)) == (sum(1 for d in docs if len(d)), len(docs) + 1)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_the_merge_of_parts_with_documents_without_tokens_equals_upstreams_builder(tmp_path: Path,
                                                                                  dtype: type) -> None:
    docs = _docs_with_empty_ones(dtype)
    expected = _upstream_builder(docs, tmp_path / "upstream", dtype)
    bounds = [0, 1, 18, 18, 41, 61]  # a part of one empty document, one of none, empty documents at part edges
    sizes, parts = [], []
    for i in range(5):
        part = PartWriter(tmp_path / f"r{i}.bin", tmp_path / f"r{i}.len", np.dtype(dtype))
        mine = docs[bounds[i]:bounds[i + 1]]
        for doc in mine:
            part.add_document(doc)
        part.finalize()
        sizes.append(merge.PartSize(len(mine), (tmp_path / f"r{i}.bin").stat().st_size,
                                    sum(1 for d in mine if not len(d))))
        parts.append((i, tmp_path / f"r{i}.bin", tmp_path / f"r{i}.len"))
    where = merge.layout(sizes)
    for mine_parts in ([parts[4], parts[1]], [parts[0], parts[3]], [parts[2]]):  # 3 ranks, in any order
        merge.write_parts(tmp_path / "merged.bin", tmp_path / "merged.idx", np.dtype(dtype), where, 5, mine_parts)
    assert ((tmp_path / "merged.bin").read_bytes(), (tmp_path / "merged.idx").read_bytes()) == expected


def test_a_training_split_of_documents_without_tokens_only_is_empty(tmp_path: Path) -> None:
    from mlrecipe_scripts.megatron.gpt.samples import split_tokens

    writer = IndexedWriter(tmp_path / "d.bin", np.dtype(np.uint16))
    for doc in ([1, 2, 3], [4, 5], [], []):
        writer.add_document(np.array(doc, dtype=np.uint16))
    writer.finalize(tmp_path / "d.idx")
    assert split_tokens(str(tmp_path / "d"), (0.5, 0.5, 0.0), "train").tolist() == [1, 2, 3, 4, 5]
    assert split_tokens(str(tmp_path / "d"), (0.5, 0.5, 0.0), "valid").tolist() == []


# --- upstream's own script ------------------------------------------------------------------------------------------

def _pinned() -> str:
    return version("megatron-core")


@pytest.fixture(scope="module")
def megatron_lm() -> Path:
    """``MEGATRON_LM_DIR``, checked to be a checkout of the pinned megatron-core's tag; skip when it is not set."""
    where = os.environ.get("MEGATRON_LM_DIR")
    if not where:
        pytest.skip(f"upstream's tools/preprocess_data.py is on GitHub only (neither the megatron-core wheel nor its "
                    f"sdist ships it), so this comparison needs MEGATRON_LM_DIR, a checkout of tag core_v{_pinned()}: "
                    f"git clone --depth 1 --branch core_v{_pinned()} https://github.com/NVIDIA/Megatron-LM "
                    f"/tmp/megatron-lm && make megatron-upstream-check MEGATRON_LM_DIR=/tmp/megatron-lm")
    root = Path(where)
    script, info = root / "tools" / "preprocess_data.py", root / "megatron" / "core" / "package_info.py"
    if not script.is_file() or not info.is_file():
        pytest.fail(f"MEGATRON_LM_DIR={root}: no tools/preprocess_data.py or megatron/core/package_info.py there")
    numbers = dict(re.findall(r"^(MAJOR|MINOR|PATCH) = (\d+)", info.read_text(), re.MULTILINE))
    found = ".".join(numbers.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))
    if found != _pinned():
        pytest.fail(f"MEGATRON_LM_DIR={root} is megatron-core {found}; this environment pins {_pinned()} "
                    f"(check out tag core_v{_pinned()})")
    if importlib.util.find_spec("triton") is None:
        pytest.fail("upstream's megatron.training imports triton (megatron/core/transformer/custom_layers/"
                    "batch_invariant_kernels.py) and this interpreter has none: put a triton on PYTHONPATH "
                    "(make megatron-upstream-check lends .venv-vllm's)")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return make_corpus(tmp_path_factory.mktemp("megatron-upstream"), shards=2)


@pytest.fixture(scope="module")
def jsonl(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shard 0's documents with :data:`EDGE_TEXTS` spread among them, one CRLF line, no newline at the end."""
    texts = corpus.texts(0)
    rows = [json.dumps({"text": t, "meta": {"pile_set_name": "x"}}, ensure_ascii=i % 2 == 0)
            for i, t in enumerate(texts)]
    step = len(rows) // len(EDGE_TEXTS)
    for k, text in enumerate(EDGE_TEXTS):
        rows.insert(k * (step + 1), json.dumps({"text": text}, ensure_ascii=k % 2 == 0))
    body = "\n".join(rows[:-1]) + "\r\n" + rows[-1]
    path = tmp_path_factory.mktemp("upstream-input") / "00.jsonl"
    path.write_bytes(body.encode())
    return path


def _tokenizer_flags(corpus: Corpus, form: str) -> tuple[list[str], list[str]]:
    """(upstream's flags, ours) for one tokenizer with the same meaning to both."""
    folder = corpus.tokenizer
    if form == "gpt2-bpe-files":  # the legacy system's GPT-2 BPE reads the files offline (the new one asks the Hub)
        files = ["--vocab-file", str(folder / "vocab.json"), "--merge-file", str(folder / "merges.txt")]
        return ["--tokenizer-type", "GPT2BPETokenizer", "--legacy-tokenizer", *files], files
    return ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder)], ["--tokenizer-dir",
                                                                                           str(folder)]


def _run_upstream(root: Path, jsonl: Path, flags: list[str], out: Path) -> Path:
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    prefix = out / "upstream"
    done = subprocess.run([sys.executable, str(root / "tools" / "preprocess_data.py"), "--input", str(jsonl),
                           "--output-prefix", str(prefix), "--append-eod", "--workers", "1", *flags],
                          env=clean_env(PYTHONPATH=path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return Path(f"{prefix}_text_document")


def _run_ours(jsonl: Path, flags: list[str], data: Path, run_id: str) -> tuple[Path, list[str]]:
    data.mkdir()
    (data / "00.jsonl").write_bytes(jsonl.read_bytes())
    args = ["--file-numbers", "0", "--data-dir", str(data), "--shard-suffix", ".jsonl", "--stages", "preprocess",
            *flags, "--append-eod", "--split-size", "8K"]
    procs = [subprocess.Popen(prepare_command(*args), env=clean_env(
        OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="2", OMPI_MCA_ess_base_jobid=run_id),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-3000:] for _, err in outs]
    return data / "pile_00_text_document", [out for out, _ in outs]


def _summary(idx: Path) -> dict[str, Any]:
    index = read_index(idx)
    return {"dtype": index.dtype.name, "sequences": len(index.lengths),
            "documents": len(index.document_indices) - 1}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("form", TOKENIZER_FORMS)
def test_two_ranks_cutting_the_file_write_upstream_preprocess_data_bytes(megatron_lm: Path, form: str, corpus: Corpus,
                                                                          jsonl: Path, tmp_path: Path) -> None:
    upstream_flags, our_flags = _tokenizer_flags(corpus, form)
    upstream = _run_upstream(megatron_lm, jsonl, upstream_flags, tmp_path)
    ours, stdouts = _run_ours(jsonl, our_flags, tmp_path / "data", f"upstream-{form}")
    for rank, stdout in enumerate(stdouts):  # both ranks tokenized ranges of the one file
        assert re.search(rf"\[rank {rank}/2\] 00\.jsonl range \d+/\d+ \(bytes", stdout), stdout[-2000:]
    up_idx, our_idx = Path(f"{upstream}.idx"), Path(f"{ours}.idx")
    summary = _summary(up_idx)
    assert summary["documents"] - summary["sequences"] == EDGE_TEXTS.count(""), summary  # empty texts: no sequence
    assert _summary(our_idx) == summary
    assert our_idx.read_bytes() == up_idx.read_bytes()
    assert Path(f"{ours}.bin").read_bytes() == Path(f"{upstream}.bin").read_bytes()
