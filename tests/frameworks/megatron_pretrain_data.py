"""Helpers of the megatron pretraining tests: small indexed datasets with a manifest in the data step's schema,
written through the data step's own writer, and the pretraining script run as the chart's tree runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from mlrecipe.ports import free_port
from mlrecipe_scripts.megatron.data.fetch import sha256_file
from mlrecipe_scripts.megatron.data.indexed import IndexedWriter

REPO = Path(__file__).resolve().parents[2]
PRETRAIN = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / "megatron" / \
    "gpt" / "pretrain.py"
VOCAB = 64
EOD = 0


def patterned_documents(count: int, seed: int) -> list[np.ndarray]:
    """Documents a small model learns fast: runs of counting token ids (start and length random), EOD last."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        start, length = int(rng.integers(1, VOCAB)), int(rng.integers(40, 120))
        docs.append(np.array([1 + (start + i) % (VOCAB - 1) for i in range(length)] + [EOD], dtype=np.uint16))
    return docs


def write_dataset(data_dir: Path, numbers: tuple[int, ...] = (0, 1), documents: int = 60,
                  prefix: str = "pile") -> Path:
    """``<prefix>_NN_text_document.bin/.idx`` for each file number and ``manifest.json``; returns the manifest."""
    data_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for number in numbers:
        name = f"{prefix}_{number:02d}_text_document"
        writer = IndexedWriter(data_dir / f"{name}.bin", np.dtype(np.uint16))
        docs = patterned_documents(documents, number)
        for doc in docs:
            writer.add_document(doc)
        writer.finalize(data_dir / f"{name}.idx")
        files = {s: {"name": f"{name}.{s}", "bytes": (data_dir / f"{name}.{s}").stat().st_size,
                     "sha256": sha256_file(data_dir / f"{name}.{s}")} for s in ("bin", "idx")}
        entries.append({"prefix": name, "file_number": number, "documents": len(docs),
                        "tokens": int(sum(len(d) for d in docs)), **files})
    manifest = {"format": "megatron-indexed-dataset", "version": 1, "dtype": "uint16", "file_numbers": list(numbers),
                "documents": sum(e["documents"] for e in entries), "tokens": sum(e["tokens"] for e in entries),
                "prefixes": entries, "tokenizer": {"kind": "test", "vocab_size": VOCAB, "eod_id": EOD, "files": []}}
    (data_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return data_dir / "manifest.json"


def script_env(metrics: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if metrics is not None:
        env["MLRECIPE_METRICS_FILE"] = str(metrics)
    return env


def run_pretrain(args: list[str], metrics: Path | None = None, timeout: float = 240,
                 nproc: int = 1) -> subprocess.CompletedProcess[str]:
    """The chart tree's ``gpt/pretrain.py`` under ``python`` (or ``torchrun`` with ``nproc`` > 1)."""
    launcher = [sys.executable] if nproc == 1 else torchrun(nproc)
    return subprocess.run([*launcher, str(PRETRAIN), *args], capture_output=True, text=True, timeout=timeout,
                          env=script_env(metrics))


def torchrun(nproc: int) -> list[str]:
    """``torchrun`` for ``nproc`` local ranks on a free port of 127.0.0.1."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
            "127.0.0.1", f"--master_port={free_port()}"]


TINY = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--micro-batch-size", "4", "--make-vocab-size-divisible-by", "1", "--lr", "3e-3", "--min-lr", "3e-4",
        "--lr-warmup-iters", "3", "--log-interval", "5"]
