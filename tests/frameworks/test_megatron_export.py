"""``gpt/export_hf.py`` of the megatron framework: a pretraining checkpoint becomes a Hugging Face GPT-2 that
transformers loads with the data's tokenizer, with the same logits as pretraining's own model on held-out samples,
the same perplexity as ``gpt/evaluate.py``, export -> import -> export bit for bit (also as megatron-core
tensor-parallel shards), megatron-core's own ``GPTModel`` (run on CPU; this project's file and megatron-core's
torch_dist save) exported with the same logits. Greedy decoding of the export through a served vLLM endpoint,
token-identical to transformers' ``generate``, is the megatron example's client step
(tests/integration/test_megatron_example.py: one vLLM start proves it).

One module-scoped run pays for the data: a BPE tokenizer trained on the sample corpus, ``data/prepare.py`` on one
JSONL file, 60 steps of the chart tree's ``gpt/pretrain.py`` (CPU, plain-torch GPT), one export.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks.megatron_data import PREPARE, clean_env
from tests.frameworks.megatron_pretrain_data import PRETRAIN, run_pretrain, script_env

pytestmark = pytest.mark.integration
EXPORT = PRETRAIN.parent / "export_hf.py"
EVALUATE = PRETRAIN.parent / "evaluate.py"
REPO = Path(__file__).resolve().parents[2]
SHAPE = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "64"]


@dataclass(frozen=True)
class Trained:
    root: Path
    data: Path
    ckpt: Path
    hf: Path


def _run(script: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env=script_env())


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    for module in ("torch", "transformers", "safetensors", "tokenizers"):
        pytest.importorskip(module)
    from mlrecipe_scripts.megatron.data import sample_corpus

    root = tmp_path_factory.mktemp("megatron-export")
    tokenizer = sample_corpus.train_tokenizer(root / "tokenizer", vocab_size=512)
    data = root / "data"
    data.mkdir()
    (data / "00.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for _, text in sample_corpus.documents()))
    prep = subprocess.run([sys.executable, str(PREPARE), "--file-numbers", "0", "--data-dir", str(data),
                           "--tokenizer-dir", str(tokenizer), "--append-eod", "--stages", "preprocess",
                           "--shard-suffix", ".jsonl", "--writer", "builtin"],
                          env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=180)
    assert prep.returncode == 0, prep.stderr[-3000:]
    ckpt = root / "ckpt"
    train = run_pretrain([*SHAPE, "--data-manifest", str(data / "manifest.json"), "--split", "90,5,5",
                          "--micro-batch-size", "8", "--train-iters", "60", "--lr", "3e-3", "--min-lr", "3e-4",
                          "--lr-warmup-iters", "5", "--log-interval", "20", "--save", str(ckpt)])
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    hf = root / "hf"
    out = _run(EXPORT, "--load", str(ckpt), "--output", str(hf))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert f"to {hf} as GPT2LMHeadModel; tokenizer from {data / 'tokenizer'}" in out.stdout, out.stdout
    return Trained(root, data, ckpt, hf)


def _held_out(trained: Trained, batches: int, size: int):  # -> list of [size, seq + 1] token tensors
    import torch

    from mlrecipe_scripts.megatron.gpt import checkpoint
    from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, parse_split

    state = checkpoint.load(trained.ckpt, checkpoint.latest(trained.ckpt) or 0)
    args = state["args"]
    samples = BlendedSamples((str(trained.data / "pile_00_text_document"),), (1.0,), parse_split(args["split"]),
                             "test", state["shape"]["seq_length"], args["seed"] + 2000, batches * size)
    return state, [torch.from_numpy(samples.batch(i * size, size)).long() for i in range(batches)]


def _hf_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype="float32").eval()


def test_export_is_a_gpt2_that_transformers_loads_with_the_tokenizer_the_data_was_prepared_with(
        trained: Trained) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    assert sorted(p.name for p in trained.hf.iterdir()) == [
        "config.json", "generation_config.json", "mlrecipe_export.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"]
    model = _hf_model(trained.hf)
    assert type(model).__name__ == "GPT2LMHeadModel"
    config = json.loads((trained.hf / "config.json").read_text())
    assert (config["activation_function"], config["tie_word_embeddings"], config["n_positions"]) == ("gelu", True, 64)
    manifest = json.loads((trained.data / "manifest.json").read_text())
    assert config["vocab_size"] == 512 and config["eos_token_id"] == manifest["tokenizer"]["eod_id"]
    tok = AutoTokenizer.from_pretrained(str(trained.hf))
    text = "Raise an exception when the list is empty."
    assert tok(text)["input_ids"] == Tokenizer.from_file(str(trained.data / "tokenizer" / "tokenizer.json")) \
        .encode(text, add_special_tokens=False).ids
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == manifest["tokenizer"]["eod_id"]
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "tied as in training"


def test_gpt2_bpe_files_become_a_fast_tokenizer_that_encodes_as_preparation_did(trained: Trained,
                                                                               tmp_path: Path) -> None:
    import shutil

    from transformers import AutoTokenizer

    from mlrecipe_scripts.megatron.data.tokenizer import TokenizerSource, load

    bpe = tmp_path / "bpe"
    bpe.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(trained.data / "tokenizer" / name, bpe / name)
    out = _run(EXPORT, "--load", str(trained.ckpt), "--output", str(tmp_path / "hf"), "--tokenizer-dir", str(bpe))
    assert out.returncode == 0, out.stderr[-3000:]
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    prepared = load(TokenizerSource.from_args(None, str(bpe / "vocab.json"), str(bpe / "merges.txt"), None))
    texts = ["Raise an exception when the list is empty.", "def f(x):\n    return x  # done"]
    assert [tok(t)["input_ids"] for t in texts] == prepared.encode(texts)
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == prepared.eod_id


def test_exported_logits_match_the_pretraining_model_on_held_out_samples(trained: Trained) -> None:
    import torch

    from mlrecipe_scripts.megatron.gpt.model import Shape, TorchGPT

    state, batches = _held_out(trained, 2, 8)
    ours = TorchGPT(Shape(**state["shape"]))
    ours.load_state_dict(state["model"])
    ours.eval()
    model = _hf_model(trained.hf)
    with torch.no_grad():
        for batch in batches:
            expected = ours(batch[:, :-1])
            got = model(input_ids=batch[:, :-1]).logits
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
            assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_evaluate_perplexity_and_a_plain_transformers_perplexity_agree_within_half_a_percent(trained: Trained) -> None:
    import torch

    figures = trained.root / "evaluation.json"
    out = _run(EVALUATE, "--load", str(trained.ckpt), "--batches", "4", "--micro-batch-size", "8", "--max-ratio",
               "1.0", "--output", str(figures))
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = json.loads(figures.read_text())
    _, batches = _held_out(trained, 4, 8)
    model = _hf_model(trained.hf)
    with torch.no_grad():
        losses = [float(model(input_ids=b[:, :-1], labels=b[:, :-1], shift_labels=b[:, 1:].contiguous()).loss)
                  for b in batches]
    ppl = math.exp(sum(losses) / len(losses))
    assert abs(ppl / theirs["perplexity"] - 1) < 0.005, (ppl, theirs)
    assert theirs["perplexity"] < 0.5 * theirs["untrained_perplexity"], "the model learned something"


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_export_import_export_round_trips_bit_exactly_also_through_megatron_tensor_parallel_shards(
        trained: Trained) -> None:
    import torch

    from mlrecipe_scripts.megatron.gpt import checkpoint

    back = trained.root / "imported"
    out = _run(EXPORT, "--import-hf", str(trained.hf), "--save", str(back))
    assert out.returncode == 0, out.stderr[-3000:]
    original = checkpoint.load(trained.ckpt, 60)
    imported = checkpoint.load(back, 60)
    assert imported["shape"] == original["shape"] and imported["impl"] == "torch"
    assert list(imported["model"]) == list(original["model"])
    for name, tensor in original["model"].items():
        assert imported["model"][name].dtype == tensor.dtype and torch.equal(imported["model"][name], tensor), name

    shards = trained.root / "megatron-tp2"
    out = _run(EXPORT, "--import-hf", str(trained.hf), "--save", str(shards), "--impl", "megatron", "--tp", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    rank1 = torch.load(shards / "iter_0000060" / "mp_rank_01" / "model_optim_rng.pt", weights_only=False)["model"]
    assert rank1["decoder.layers.0.self_attention.linear_qkv.weight"].shape == (96, 64), "one head of two per rank"
    assert rank1["decoder.layers.0.mlp.linear_fc2.weight"].shape == (64, 128)
    again = trained.root / "hf-again"
    out = _run(EXPORT, "--load", str(shards), "--output", str(again), "--tokenizer-dir", str(trained.hf))
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = _tensors(trained.hf), _tensors(again)
    assert list(first) == list(second)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert json.loads((again / "config.json").read_text()) == json.loads((trained.hf / "config.json").read_text())


@pytest.mark.parametrize("layout", ["ckpt", "dist"])
def test_megatron_core_gpt_model_run_on_cpu_exports_with_the_same_logits(megatron_core_run: Path, layout: str,
                                                                         tmp_path: Path) -> None:
    """``ckpt``: this project's file of megatron-core's state dict; ``dist``: megatron-core's own torch_dist save."""
    import torch

    out = _run(EXPORT, "--load", str(megatron_core_run / layout), "--output", str(tmp_path / "hf"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "(megatron, 2 layers x 64" in out.stdout and "no tokenizer" in out.stdout
    assert not out.stderr.strip(), out.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["eos_token_id"] is None
    expected = torch.load(megatron_core_run / "logits.pt")
    with torch.no_grad():
        got = _hf_model(tmp_path / "hf")(input_ids=expected["tokens"]).logits
    torch.testing.assert_close(got, expected["logits"], rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def megatron_core_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """megatron-core's GPTModel built and run on CPU, saved both ways (tests/frameworks/megatron_core_cpu.py)."""
    pytest.importorskip("megatron.core")
    out = tmp_path_factory.mktemp("megatron-core-cpu")
    made = subprocess.run([sys.executable, "-m", "tests.frameworks.megatron_core_cpu", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=240, env=script_env())
    assert made.returncode == 0, made.stderr[-3000:]
    return out


def test_bad_input_is_one_error_line(trained: Trained, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _run(EXPORT, "--load", str(empty), "--output", str(tmp_path / "hf"))
    assert (out.returncode, out.stderr.strip()) == (1, f"error: --load {empty}: no checkpoint")
    assert not (tmp_path / "hf").exists()
    wrong = tmp_path / "gelu-new"
    wrong.mkdir()
    config = json.loads((trained.hf / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    (wrong / "model.safetensors").write_bytes((trained.hf / "model.safetensors").read_bytes())
    out = _run(EXPORT, "--import-hf", str(wrong), "--save", str(tmp_path / "ckpt"))
    assert out.returncode == 1 and out.stderr.strip().endswith("activation_function 'gelu_new': these GPTs need "
                                                              "'gelu'"), out.stderr
    assert not (tmp_path / "ckpt").exists()
    out = _run(EXPORT, "--output", str(tmp_path / "hf"))
    assert out.returncode == 2 and "give --load and --output" in out.stderr
