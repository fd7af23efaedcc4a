"""The raytrain recipes' pipeline (``framework: ray_train``), run for real on CPU with a tiny model and local data.

``cd <scripts>`` then ``python text/ray_train_sft.py ...`` (the script starts a private local Ray, 2 CPUs, no
dashboard, runs 2 Ray Train workers with gloo, and stops Ray again), ``python shared/convert_checkpoint_to_hf.py``
and ``python shared/test_checkpoint.py``, all under one ``$HOME`` (one release), as the reference recipes run them.
One training run is shared by the assertions (Ray is slow to start on 2 cores). Bad input is checked without Ray.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import (
    Run,
    need_ml_stack,
    need_ray,
    ray_env,
    read_jsonl,
    run_python,
    wait_until_no_ray_processes,
)

pytestmark = pytest.mark.integration

MODEL_ID = "tiny/llama"  # like Qwen/Qwen3-14B: the Ray run is results/tiny-llama
LORA_ARGS = ["--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0"]


def state_dict(path: Path) -> dict:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@dataclass
class Release:
    """One release's ``$HOME`` after the SFT step."""

    home: Path
    run: Run
    metrics: Path
    leftover: list[str]

    @property
    def ray_run(self) -> Path:
        return self.home / "results" / "tiny-llama"

    @property
    def checkpoint(self) -> Path:
        """``checkpoint/`` of the newest Ray checkpoint (what convert / evaluate pick)."""
        return max(self.ray_run.glob("checkpoint_*[0-9]"), key=lambda p: p.stat().st_mtime) / "checkpoint"


@pytest.fixture(scope="module")
def sft(ray_scripts: Path, tiny_model: Path, instruction_dataset: Path, ray_tmp: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Release:
    """LoRA SFT on 2 Ray Train CPU workers, 30 steps, eval every 10 (checkpoints at evals that improve)."""
    need_ray()
    home = tmp_path_factory.mktemp("efs-home-ray")
    metrics = home / "metrics.jsonl"
    run = run_python(ray_scripts, "text/ray_train_sft.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--hfdc_dataset_name={instruction_dataset}",
        "--max_steps=30", "--per_device_train_batch_size=4", "--per_device_eval_batch_size=4",
        "--gradient_accumulation_steps=1", "--eval_steps=10", "--logging_steps=5", "--learning_rate=3e-3",
        "--warmup_ratio=0.05", "--max_seq_length=128", "--dataloader_num_workers=0", *LORA_ARGS,
    ], home, timeout=420, **ray_env(ray_tmp, MLRECIPE_METRICS_FILE=str(metrics)))
    leftover = wait_until_no_ray_processes(ray_tmp)
    assert run.returncode == 0, run.describe()
    return Release(home, run, metrics, leftover)


@pytest.mark.slow
def test_sft_on_ray_learns_and_writes_ray_checkpoints(sft: Release) -> None:
    out = sft.run.stdout
    assert "started a local Ray" in out and "2 CPU worker(s), 1 CPU each, backend gloo" in out
    assert "weights float32" in out and "attention sdpa" in out
    assert not sft.leftover, f"Ray processes left behind: {sft.leftover}"

    [ready] = list((sft.home / "datasets").rglob(".data_ready"))
    assert ready.parent.name == "train=90%-val=5%-test=5%" and ready.parent.parent.name == "default"
    assert [len(read_jsonl(ready.parent / f)) for f in ("training.jsonl", "validation.jsonl", "test.jsonl")] == \
        [270, 15, 15]
    assert read_jsonl(ready.parent / "test.jsonl")[0]["input"].startswith("### Instruction:\n")

    records = read_jsonl(sft.metrics)  # written by world rank 0 only
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    evals = [r["metrics"]["eval_loss"] for r in records if "eval_loss" in r.get("metrics", {})]
    assert len(losses) == 6 and len(evals) == 3, records
    assert losses[-1] < losses[0] - 0.3, losses  # it learns
    assert evals[-1] < evals[0], evals

    # Ray keeps at most 2 checkpoints, named by step; the newest is the best evaluation
    ckpts = sorted(p.name for p in sft.ray_run.glob("checkpoint_*[0-9]"))
    best_step = 10 * (evals.index(min(evals)) + 1)
    assert 1 <= len(ckpts) <= 2 and ckpts[-1] == f"checkpoint_{best_step:06d}", (ckpts, evals)
    hf = sft.checkpoint
    assert hf.parent.name == ckpts[-1]
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "trainer_state.json",
                 "rng_state_0.pth", "rng_state_1.pth"):  # two workers
        assert (hf / name).is_file(), name
    assert json.loads((hf / "adapter_config.json").read_text())["r"] == 8
    results = sft.home / "results"
    assert (results / "train_results.json").is_file() and list((results / "logs").glob("events.out.tfevents.*"))
    assert f"newest checkpoint {hf.parent}" in out


@pytest.fixture(scope="module")
def merged(sft: Release, ray_scripts: Path, tiny_model: Path) -> Run:
    return run_python(ray_scripts, "shared/convert_checkpoint_to_hf.py",
                      [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}"], sft.home)


@pytest.mark.slow
def test_convert_merges_the_trained_adapter(sft: Release, merged: Run, tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert merged.returncode == 0, merged.describe()
    out = Path(f"{sft.checkpoint}.hf_model")
    assert out.is_dir() and (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(out.parent.glob(".*tmp*"))
    base, converted = state_dict(tiny_model), state_dict(out)
    key = "model.layers.1.mlp.down_proj.weight"
    assert not torch.equal(base[key], converted[key]), "the LoRA delta must be merged in"
    assert torch.equal(base["model.embed_tokens.weight"], converted["model.embed_tokens.weight"])
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                          sft.checkpoint).merge_and_unload().state_dict()
    for name, tensor in converted.items():
        torch.testing.assert_close(tensor, reference[name], msg=name)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert model(**tok("### Instruction:\nRepeat", return_tensors="pt")).logits.isfinite().all()


@pytest.mark.slow
def test_convert_no_merge_writes_the_adapter(sft: Release, merged: Run, ray_scripts: Path, tiny_model: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = run_python(ray_scripts, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--no_merge"], sft.home)
    assert run.returncode == 0, run.describe()
    out = Path(f"{sft.checkpoint}.hf_peft")  # the same (newest) checkpoint as the merge
    assert (out / "base_model.txt").read_text() == str(tiny_model)
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), out)


@pytest.mark.slow
def test_evaluate_writes_predictions_and_scores(sft: Release, merged: Run, ray_scripts: Path,
                                                tiny_model: Path) -> None:
    run = run_python(ray_scripts, "shared/test_checkpoint.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", "--max_samples=12",
                      "--batch_size=5", "--max_tokens=12", "--temperature=0"],
                     sft.home, MLRECIPE_GENERATOR="transformers")
    assert run.returncode == 0, run.describe()
    ckpt = sft.checkpoint
    rows = read_jsonl(ckpt / "predictions.jsonl")
    assert len(rows) == 12 and all(set(r) == {"input", "label", "prediction"} for r in rows)
    test_rows = read_jsonl(next((sft.home / "datasets").rglob("test.jsonl")))
    assert [r["input"] for r in rows] == [t["input"] for t in test_rows[:12]]
    assert [r["label"] for r in rows] == [t["output"] for t in test_rows[:12]]
    assert all(r["prediction"] for r in rows)
    summary = json.loads((ckpt / "evaluation.json").read_text())
    assert summary["generator"] == "transformers" and "generator: transformers" in run.stdout
    assert summary["sampling"]["greedy"] is True
    if summary["metric"] == "bertscore":
        assert set(summary["scores"]) == {"bertscore_f1"}
    else:  # the reference's BERTScore is not available offline here: the local metric, and the log says so
        assert "using local metrics" in run.stdout and set(summary["scores"]) == {"token_f1", "rouge_l_f1"}
    assert all(0.0 <= v <= 1.0 for v in summary["scores"].values())
    assert summary["scores"][next(iter(summary["scores"]))] > 0  # the "### Response:" prefix is learned


# --------------------------------------------------------------------------------------------------------------
# bad input and checkpoint discovery (no Ray started)


def test_bad_input_gives_one_clear_line(ray_scripts: Path, tiny_model: Path, tmp_path: Path) -> None:
    need_ml_stack()
    home = tmp_path / "home"
    # an unknown flag: argparse's usage error, status 2 (the reference's test_checkpoint has no --lora_rank)
    run = run_python(ray_scripts, "shared/test_checkpoint.py", ["--base_model=tiny/llama", "--lora_rank=8"], home)
    assert run.returncode == 2 and run.last_error_line.endswith("unrecognized arguments: --lora_rank=8"), \
        run.describe()
    run = run_python(ray_scripts, "text/ray_train_sft.py", ["--trust_remote_code"], home)  # only CPT has it
    assert run.returncode == 2 and "unrecognized arguments: --trust_remote_code" in run.last_error_line

    # no checkpoint to convert: one "error:" line, status 1
    missing = tmp_path / "no-such-results"
    run = run_python(ray_scripts, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", f"--checkpoints_dir={missing}"], home)
    assert run.returncode == 1, run.describe()
    assert run.stderr.strip().splitlines() == [run.last_error_line]
    assert run.last_error_line.startswith(f"error: --checkpoints_dir={missing}: no such directory")
    (missing / "TorchTrainer_x").mkdir(parents=True)
    run = run_python(ray_scripts, "shared/test_checkpoint.py", [f"--checkpoints_dir={missing}"], home)
    assert run.returncode == 1 and run.last_error_line.startswith("error: --checkpoints_dir=") and \
        "no checkpoint_* directory" in run.last_error_line, run.describe()

    # a model directory that does not exist: refused before Ray starts
    run = run_python(ray_scripts, "text/ray_train_sft.py", [f"--model_path={tmp_path / 'nope'}"], home,
                     RAY_ADDRESS="")
    assert run.returncode == 1 and run.stderr.strip().splitlines() == [
        f"error: --model_path={tmp_path / 'nope'}: no such directory"], run.describe()
    assert "Ray" not in run.stdout
    empty = tmp_path / "empty-dataset"
    empty.mkdir()
    run = run_python(ray_scripts, "text/ray_train_sft.py", [f"--model_path={tiny_model}",
                                                           f"--hfdc_dataset_name={empty}"], home, RAY_ADDRESS="")
    assert run.returncode == 1 and run.stderr.strip().splitlines() == [
        f"error: --hfdc_dataset_name={empty}: the directory holds no non-empty .jsonl/.json/.csv/.parquet file"], \
        run.describe()


def test_newest_ray_checkpoint_rule(ray_scripts: Path, tmp_path: Path) -> None:
    """Newest ``TorchTrainer_*`` (v1 layout) by mtime, then newest ``checkpoint_*`` by mtime, then ``checkpoint/``."""
    common = importlib.import_module("mlrecipe_scripts.ray_train.common")

    def make(path: Path, mtime: float) -> Path:
        (path / "checkpoint").mkdir(parents=True)
        (path / "checkpoint" / "config.json").write_text("{}")
        os.utime(path, (mtime, mtime))
        return path

    v1 = tmp_path / "v1"
    make(v1 / "TorchTrainer_old" / "checkpoint_000009", 1000)
    os.utime(v1 / "TorchTrainer_old", (1000, 1000))
    make(v1 / "TorchTrainer_new" / "checkpoint_000000", 2000)
    make(v1 / "TorchTrainer_new" / "checkpoint_000001", 3000)
    make(v1 / "TorchTrainer_new" / "checkpoint_000002", 2500)
    os.utime(v1 / "TorchTrainer_new", (4000, 4000))
    assert common.latest_ray_checkpoint(v1) == v1 / "TorchTrainer_new" / "checkpoint_000001" / "checkpoint"

    v2 = tmp_path / "v2"  # later layouts: checkpoint_* directly under the run directory
    make(v2 / "checkpoint_000010", 1000)
    make(v2 / "checkpoint_000020", 2000)
    (v2 / "checkpoint_000020" / "checkpoint.hf_model").mkdir()  # a converted sibling is not a checkpoint
    assert common.latest_ray_checkpoint(v2) == v2 / "checkpoint_000020" / "checkpoint"


@pytest.mark.slow
def test_cpt_on_ray_from_a_prepared_data_dir(ray_scripts: Path, tiny_model: Path, ray_tmp: Path,
                                             tmp_path: Path) -> None:
    need_ray()
    home = tmp_path / "home"
    data_dir = tiny.make_prepared_cpt_dir(tmp_path / "fsx" / "cpt-data", n_train=64, n_val=8)
    metrics = tmp_path / "metrics.jsonl"
    run = run_python(ray_scripts, "text/cpt_ray_train.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--data_dir={data_dir}", "--num_train_epochs=2",
        "--per_device_train_batch_size=4", "--gradient_accumulation_steps=1", "--warmup_steps=1",
        "--eval_steps=4", "--save_steps=4", "--logging_steps=2", "--learning_rate=3e-3", "--max_seq_length=64",
        "--num_workers=0"], home, timeout=420, **ray_env(ray_tmp, MLRECIPE_METRICS_FILE=str(metrics)))
    assert run.returncode == 0, run.describe()
    assert "nothing is loaded" in run.stdout
    assert not wait_until_no_ray_processes(ray_tmp)
    out = home / "results" / "tiny-llama-cpt"
    assert sorted(p.name for p in out.glob("checkpoint_*[0-9]")) == ["checkpoint_000012", "checkpoint_000016"]
    assert (out / "checkpoint_000016" / "checkpoint" / "model.safetensors").is_file()
    records = read_jsonl(metrics)
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    assert losses[-1] < losses[0] - 0.5, losses
