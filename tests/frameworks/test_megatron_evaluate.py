"""``gpt/evaluate.py`` on megatron-core checkpoints (the EKS path trains megatron-core's ``GPTModel`` and saves
``torch_dist``): megatron-core's training machinery run on CPU for 4 steps (tests/frameworks/megatron_core_cpu_train.py)
with a small indexed dataset named in its args, saved as megatron-core's distributed checkpoint; evaluate's
perplexity of that checkpoint agrees with a plain ``transformers`` perplexity of its export on the same held-out
samples (issue 39 point 5: within 0.5 %), and the same weights as 2 tensor-parallel shards (``mp_rank_00/01``,
written by ``export_hf.py --import-hf --impl megatron --tp 2``) give the same perplexity."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frameworks.megatron_pretrain_data import PRETRAIN, REPO, script_env, write_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EVALUATE = PRETRAIN.with_name("evaluate.py")
EXPORT = PRETRAIN.with_name("export_hf.py")
SPLIT = "80,10,10"
BATCHES, SIZE = 2, 4


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300,
                          env=script_env())


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding ``ckpt/`` (megatron-core's torch_dist checkpoint of iteration 4) and ``data/``."""
    pytest.importorskip("megatron.core", reason="megatron-core is in the megatron extra")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("megatron-evaluate")
    manifest = write_dataset(root / "data", numbers=(0,), documents=80)
    done = subprocess.run([sys.executable, "-m", "tests.frameworks.megatron_core_cpu_train", str(root / "run.json"),
                           "--data-manifest", str(manifest), "--split", SPLIT], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=script_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def _evaluate(load: Path, output: Path) -> dict:
    out = _run(EVALUATE, "--load", str(load), "--batches", str(BATCHES), "--micro-batch-size", str(SIZE),
               "--max-ratio", "1000", "--output", str(output))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "held-out (test) perplexity after 4 steps" in out.stdout, out.stdout
    return json.loads(output.read_text())


def _transformers_perplexity(hf: Path, data: Path, seq_length: int, seed: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, parse_split

    samples = BlendedSamples((str(data / "pile_00_text_document"),), (1.0,), parse_split(SPLIT), "test", seq_length,
                             seed + 2000, BATCHES * SIZE)
    model = AutoModelForCausalLM.from_pretrained(str(hf), dtype="float32").eval()
    losses = []
    with torch.no_grad():
        for i in range(BATCHES):
            batch = torch.from_numpy(samples.batch(i * SIZE, SIZE)).long()
            losses.append(float(model(input_ids=batch[:, :-1], labels=batch[:, :-1],
                                      shift_labels=batch[:, 1:].contiguous()).loss))
    return math.exp(sum(losses) / len(losses))


def test_evaluate_reads_a_torch_dist_checkpoint_and_agrees_with_transformers_on_its_export(trained: Path) -> None:
    from mlrecipe_scripts.megatron.gpt import megatron_checkpoint

    figures = _evaluate(trained / "ckpt", trained / "dist.json")
    assert figures["impl"] == "megatron" and figures["iteration"] == 4 and figures["device"] == "cpu"
    assert figures["checkpoint"] == str(trained / "ckpt" / "iter_0000004")
    assert 1 < figures["perplexity"] < 1000 and 1 < figures["untrained_perplexity"] < 1000, figures
    out = _run(EXPORT, "--load", str(trained / "ckpt"), "--output", str(trained / "hf"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    saved = megatron_checkpoint.read(trained / "ckpt" / "iter_0000004")
    theirs = _transformers_perplexity(trained / "hf", trained / "data", int(saved["shape"]["seq_length"]),
                                      int(saved["args"]["seed"]))
    assert abs(theirs / figures["perplexity"] - 1) < 0.005, (theirs, figures)


def test_evaluate_merges_tensor_parallel_shards_to_the_same_perplexity(trained: Path) -> None:
    whole = _evaluate(trained / "ckpt", trained / "whole.json")
    if not (trained / "hf").is_dir():
        out = _run(EXPORT, "--load", str(trained / "ckpt"), "--output", str(trained / "hf"))
        assert out.returncode == 0, out.stderr[-3000:]
    out = _run(EXPORT, "--import-hf", str(trained / "hf"), "--save", str(trained / "tp2"), "--impl", "megatron",
               "--tp", "2")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert sorted(p.name for p in (trained / "tp2" / "iter_0000004").iterdir()) == ["mp_rank_00", "mp_rank_01"]
    sharded = _evaluate(trained / "tp2", trained / "tp2.json")
    assert sharded["impl"] == "megatron"
    assert sharded["perplexity"] == pytest.approx(whole["perplexity"], rel=1e-6)
    assert sharded["untrained_perplexity"] == pytest.approx(whole["untrained_perplexity"], rel=1e-6)
