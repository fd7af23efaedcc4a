"""The framework examples run end to end on the local backend, on CPU, as a user runs them
(``mlrecipe run examples/frameworks/<framework>/pipeline.yaml``), and what they write proves the work was done:
the loss went down, the converted model differs from the base and reloads, the evaluation computed its metric."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import MLRECIPE, cli, ray_processes
from tests.repo import EXAMPLES, REPO, cli_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _records(metrics: Path) -> list[dict]:
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in records if "metrics" in r]


def _losses(metrics: Path) -> list[float]:
    return [r["metrics"]["loss"] for r in _records(metrics) if "loss" in r["metrics"]]


def _base_model(mlhome: Path) -> Path:
    return mlhome / "volumes" / "pv-fsx" / "pretrained-models" / "tiny" / "qwen3"


def _assert_merged(base: Path, converted: Path, torch, auto_model) -> None:
    """The converted model reloads as a plain HF model and carries the merged LoRA update."""
    key = "model.layers.0.self_attn.q_proj.weight"
    tuned = auto_model.from_pretrained(converted).state_dict()
    assert not any("lora" in k for k in tuned), "the adapter is merged, not kept beside the weights"
    assert not torch.equal(auto_model.from_pretrained(base).state_dict()[key], tuned[key]), \
        "the LoRA update is merged into the converted model"


def _assert_evaluated(evaluation: dict, min_f1: float) -> None:
    """test_checkpoint computed its metric on the test split (5 % of 300 rows, at most --max_samples=16) and the
    answers overlap the labels (the untrained model's are random tokens)."""
    assert 10 <= evaluation["samples"] <= 16 and evaluation["metric"], evaluation
    assert all(0.0 <= v <= 1.0 for v in evaluation["scores"].values()), evaluation
    assert max(evaluation["scores"].values()) > 0, evaluation
    token_f1 = evaluation["scores"].get("token_f1")  # absent where BERTScore's model was at hand
    assert token_f1 is None or token_f1 >= min_f1, evaluation


def test_accelerate_example_fine_tunes_converts_and_evaluates(mlhome: Path) -> None:
    pytest.importorskip("peft", reason="the accelerate scripts need the frameworks extra (pip install '.[frameworks]')")
    import torch
    from transformers import AutoModelForCausalLM

    done = cli(mlhome, "run", str(EXAMPLES / "frameworks" / "accelerate" / "pipeline.yaml"), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bound at /etc/framework-scripts" in done.stdout
    steps = mlhome / "releases" / "local" / "default" / "accelerate-sft" / "steps"
    losses = _losses(steps / "fine-tune" / "metrics.jsonl")
    assert len(losses) >= 10 and losses[-1] < losses[0] - 0.5, losses
    results = mlhome / "volumes" / "pv-efs" / "home" / "accelerate-sft" / "results" / "tiny" / "qwen3"
    (converted,) = results.glob("checkpoint-*.hf_model")
    base = AutoModelForCausalLM.from_pretrained(mlhome / "volumes" / "pv-fsx" / "pretrained-models" / "tiny" /
                                                "qwen3").state_dict()
    tuned = AutoModelForCausalLM.from_pretrained(converted).state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(base[key], tuned[key]), "the LoRA update is merged into the converted model"
    evaluation = json.loads((Path(str(converted).removesuffix(".hf_model")) / "evaluation.json").read_text())
    assert 10 <= evaluation["samples"] <= 16 and evaluation["metric"]  # the 5 % test split, at most --max_samples
    assert all(0.0 <= v <= 1.0 for v in evaluation["scores"].values()) and max(evaluation["scores"].values()) > 0
    log = cli(mlhome, "logs", "accelerate-sft", "evaluate").stdout
    assert "generator: transformers" in log or "generator: vllm" in log


def _slurm_task_env(home: Path) -> dict[str, str]:
    """The CLI's environment plus what a Slurm job step of one task per node shows its task (what ``--backend
    slurm`` starts for every node; no SLURM_JOB_ID, so the step runtime keeps the local backend's contract)."""
    return {**cli_env(home), "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
            "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_JOB_NAME": "lightning-sft-fine-tune"}


def test_lightning_example_fine_tunes_converts_and_evaluates(mlhome: Path) -> None:
    """``python fine_tune.py --gpus_per_node=$PET_NPROC_PER_NODE`` as the reference recipe launches it: Lightning
    starts the node's 2 processes itself, also where a Slurm task's variables are in the environment (Lightning
    would otherwise take its Slurm environment and refuse 2 devices for a task of 1)."""
    pytest.importorskip("lightning", reason="the pytorch_lightning scripts need lightning (the frameworks extra)")
    pytest.importorskip("peft", reason="the pytorch_lightning scripts need the frameworks extra")
    import torch
    from transformers import AutoModelForCausalLM

    done = subprocess.run([*MLRECIPE, "run", str(EXAMPLES / "frameworks" / "pytorch_lightning" / "pipeline.yaml")],
                          env=_slurm_task_env(mlhome), capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bound at /etc/framework-scripts" in done.stdout
    log = cli(mlhome, "logs", "lightning-sft", "fine-tune").stdout
    assert "1 node(s) x 2 process(es); Lightning-launched processes" in log, log[-4000:]
    assert "Starting with 2 processes" in log and "distributed_backend=gloo" in log
    steps = mlhome / "releases" / "local" / "default" / "lightning-sft" / "steps"
    records = _records(steps / "fine-tune" / "metrics.jsonl")
    train = [r["metrics"]["train_loss_step"] for r in records if "train_loss_step" in r["metrics"]]
    val = [r["metrics"]["val_loss"] for r in records if "val_loss" in r["metrics"]]
    # the untrained loss is ~ln(400) = 6.0; LoRA on a 2-layer model of width 64 levels off near 4.8
    assert len(train) >= 20 and train[-1] < train[0] - 0.4, train
    assert len(val) >= 3 and val[-1] < val[0] - 0.2, val
    home = mlhome / "volumes" / "pv-efs" / "home" / "lightning-sft"
    assert (home / "logs" / "0" / "fine-tune.log").is_file()  # the recipe's own tee, as in the reference
    checkpoints = home / "results" / "tiny" / "qwen3" / "checkpoints"
    (ckpt,) = checkpoints.glob("model-peft-lora-epoch=*-step=*.ckpt")
    (converted,) = checkpoints.glob("model-peft-lora-*.hf_model")
    assert converted.name == ckpt.name.removesuffix(".ckpt") + ".hf_model"
    _assert_merged(_base_model(mlhome), converted, torch, AutoModelForCausalLM)
    evaluation = json.loads(ckpt.with_name(ckpt.name.removesuffix(".ckpt") + ".evaluation.json").read_text())
    _assert_evaluated(evaluation, min_f1=0.3)
    assert evaluation["generator"] in cli(mlhome, "logs", "lightning-sft", "evaluate").stdout


def test_ray_train_example_fine_tunes_converts_and_evaluates(mlhome: Path) -> None:
    """``python text/ray_train_sft.py`` as the driver of a Ray job on a local Ray cluster (a head and 2 worker
    nodes), the HF Trainer in 2 Ray Train workers; convert and evaluate as Ray jobs too; no Ray process outlives the
    release. The training/raytrain chart's Ray Train job on the local backend is proven here: it learns with two
    workers and leaves no Ray process."""
    pytest.importorskip("ray.train", reason="the ray_train scripts need Ray Train (the frameworks extra)")
    pytest.importorskip("peft", reason="the ray_train scripts need the frameworks extra")
    import torch
    from transformers import AutoModelForCausalLM

    done = cli(mlhome, "run", str(EXAMPLES / "frameworks" / "ray_train" / "pipeline.yaml"), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bound at /etc/framework-scripts" in done.stdout
    assert "a head (1 CPU) and 2 node(s) in group training" in done.stdout
    steps = mlhome / "releases" / "local" / "default" / "ray-train-sft" / "steps"
    records = _records(steps / "fine-tune" / "metrics.jsonl")
    train = [r["metrics"]["loss"] for r in records if "loss" in r["metrics"]]
    evals = [r["metrics"]["eval_loss"] for r in records if "eval_loss" in r["metrics"]]
    assert len(train) >= 10 and train[-1] < train[0] - 0.5, train
    assert len(evals) >= 3 and evals[-1] < evals[0], evals
    home = mlhome / "volumes" / "pv-efs" / "home" / "ray-train-sft"
    assert list(home.glob("logs/*/fine-tune.log")), "the recipe's own tee to $HOME/logs/$HOSTNAME/"
    run = home / "results" / "tiny-qwen3"  # Ray Train's storage: <results>/<hf_model_id, / -> ->
    newest = max(run.glob("checkpoint_*[0-9]"), key=lambda p: p.stat().st_mtime) / "checkpoint"
    assert (newest / "adapter_model.safetensors").is_file()
    # a Ray Train job of 2 DDP workers on the cluster's 2 worker nodes: each rank saved its RNG state
    fine_tune = cli(mlhome, "logs", "ray-train-sft", "fine-tune").stdout
    assert "2 CPU worker(s), 1 CPU each, backend gloo" in fine_tune, fine_tune[-3000:]
    assert (newest / "rng_state_0.pth").is_file() and (newest / "rng_state_1.pth").is_file()
    _assert_ray_train_data_and_checkpoints(home, run, newest, evals, fine_tune)
    converted = newest.with_name("checkpoint.hf_model")
    _assert_merged(_base_model(mlhome), converted, torch, AutoModelForCausalLM)
    _assert_merged_exactly(_base_model(mlhome), newest, converted, torch, AutoModelForCausalLM)
    _assert_evaluated(json.loads((newest / "evaluation.json").read_text()), min_f1=0.15)
    _assert_ray_train_predictions(home, newest)
    assert not ray_processes(mlhome), "the release's Ray processes ended with its steps"
    _assert_no_merge_writes_the_adapter(steps / "convert" / "framework-scripts", home, _base_model(mlhome), newest)


def _assert_ray_train_data_and_checkpoints(home: Path, run: Path, newest: Path, evals: list[float],
                                           log: str) -> None:
    """The split rank 0 prepared, and Ray's checkpoints: at most 2 kept, named by step, the newest the best
    evaluation (every 25 steps), with the HF Trainer's files and both workers' RNG states."""
    [ready] = list((home / "datasets").rglob(".data_ready"))
    assert ready.parent.name == "train=90%-val=5%-test=5%" and ready.parent.parent.name == "default"
    assert [len(_jsonl(ready.parent / f)) for f in ("training.jsonl", "validation.jsonl", "test.jsonl")] == \
        [270, 15, 15]
    assert _jsonl(ready.parent / "test.jsonl")[0]["input"].startswith("### Instruction:\n")
    ckpts = sorted(p.name for p in run.glob("checkpoint_*[0-9]"))
    assert 1 <= len(ckpts) <= 2 and ckpts[-1] == f"checkpoint_{25 * (evals.index(min(evals)) + 1):06d}", \
        (ckpts, evals)
    assert newest.parent.name == ckpts[-1]
    for name in ("adapter_config.json", "tokenizer.json", "trainer_state.json"):
        assert (newest / name).is_file(), name
    assert (home / "results" / "train_results.json").is_file()
    assert list((home / "results" / "logs").glob("events.out.tfevents.*"))
    assert f"newest checkpoint /efs/home/ray-train-sft/results/tiny-qwen3/{ckpts[-1]}" in log, log[-3000:]


def _assert_merged_exactly(base: Path, adapter: Path, converted: Path, torch, auto_model) -> None:
    """Every converted tensor is peft's own merge of the adapter; the embeddings LoRA does not touch are the base's."""
    from peft import PeftModel
    from safetensors.torch import load_file

    reference = PeftModel.from_pretrained(auto_model.from_pretrained(base), adapter).merge_and_unload().state_dict()
    tensors = load_file(converted / "model.safetensors")
    for name, tensor in tensors.items():
        torch.testing.assert_close(tensor, reference[name], msg=name)
    key = "model.embed_tokens.weight"
    assert torch.equal(tensors[key], load_file(base / "model.safetensors")[key])
    assert (converted / "tokenizer.json").is_file() and not list(converted.parent.glob(".*tmp*"))


def _assert_ray_train_predictions(home: Path, newest: Path) -> None:
    """One prediction per test row, in the test split's order, sampled at the reference's default temperature (the
    recipe sets none)."""
    rows = _jsonl(newest / "predictions.jsonl")
    test_rows = _jsonl(next((home / "datasets").rglob("test.jsonl")))[:len(rows)]
    assert len(rows) == 15 and all(set(r) == {"input", "label", "prediction"} for r in rows)
    assert [(r["input"], r["label"]) for r in rows] == [(t["input"], t["output"]) for t in test_rows]
    assert all(r["prediction"] for r in rows)
    summary = json.loads((newest / "evaluation.json").read_text())
    assert summary["generator"] == "transformers" and summary["sampling"]["temperature"] == 0.1, summary


def _assert_no_merge_writes_the_adapter(scripts: Path, home: Path, base: Path, newest: Path) -> None:
    """``convert_checkpoint_to_hf.py --no_merge`` (no Ray needed) keeps the adapter beside the base model's path."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.frameworks.helpers import run_python

    run = run_python(scripts, "shared/convert_checkpoint_to_hf.py",
                     ["--base_model=tiny/qwen3", f"--model_path={base}", "--no_merge"], home)
    assert run.returncode == 0, run.describe()
    out = Path(f"{newest}.hf_peft")
    assert (out / "base_model.txt").read_text() == str(base)
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), out)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
