"""The accelerate preference scripts: ``text/rm_dataset_module.py``, ``text/reward_model_accelerate.py`` and
``text/dpo_accelerate.py``.

Fast tests: the command lines (family D0, ``--rmdc_*``), data preparation and pair tokenization, the converted
checkpoint lookup. Integration tests: ``cd <scripts> && accelerate launch --multi_gpu --num_processes 2 ...`` on
CPU (gloo) with the tiny model, starting from converted SFT checkpoints laid out as
``shared/convert_checkpoint_to_hf.py`` writes them under ``$HOME/results/<hf_model_id>`` (the tiny model itself as
``checkpoint-N.hf_model``, or a LoRA adapter on it as ``checkpoint-N.hf_peft``), and bad input.
"""

from __future__ import annotations

import importlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks import preference_data, tiny
from tests.frameworks.helpers import Run, need_ml_stack, run_accelerate, run_python

MODEL_ID = "tiny/llama"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_error(run: Run, *needles: str) -> None:
    assert run.returncode == 1, run.describe()
    line = run.last_error_line
    assert line.startswith("error: "), run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


@pytest.fixture(scope="module")
def reward(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.reward_model_accelerate")


@pytest.fixture(scope="module")
def dpo(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.dpo_accelerate")


@pytest.fixture(scope="module")
def rmdata(reward: ModuleType) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.rm_dataset")


@pytest.fixture(scope="module")
def common(reward: ModuleType) -> ModuleType:
    from mlrecipe_scripts.accelerate import common as module

    return module


# --------------------------------------------------------------------------------------------------------------
# command lines


def test_reward_model_defaults_and_flags(reward: ModuleType, rmdata: ModuleType) -> None:
    args = reward.parse_args([])
    assert args.hf_model_id == "Qwen/Qwen3-8B" and args.sft_model_path is None
    assert args.trust_remote_code is True and args.full_ft is False
    assert (args.lora_rank, args.lora_alpha, args.lora_dropout) == (32, 32, 0.1)
    assert args.rmdc == rmdata.RMDatasetConfig(dataset_name="Anthropic/hh-rlhf")
    assert (args.rmdc.split, args.rmdc.train_split_ratio, args.rmdc.val_test_split_ratio, args.rmdc.num_proc) == \
        ("train", 0.9, 0.5, 8)
    assert (args.max_steps, args.per_device_train_batch_size, args.per_device_eval_batch_size) == (10000, 2, 2)
    assert (args.gradient_accumulation_steps, args.learning_rate, args.weight_decay) == (4, 5e-5, 0.01)
    assert (args.warmup_steps, args.max_grad_norm, args.max_seq_length) == (100, 1.0, 2048)
    assert (args.early_stopping_patience, args.early_stopping_threshold) == (3, 0.001)
    assert (args.logging_steps, args.eval_steps, args.max_eval_samples, args.seed, args.num_workers) == \
        (10, 100, 640, 42, 8)
    assert args.data_dir is None and args.output_dir is None and args.use_wandb is False

    args = reward.parse_args(["--trust_remote_code", "--full_ft", "--lora_target_modules=q_proj, v_proj",
                              "--rmdc_dataset_name=/data/prefs", "--rmdc_train_split_ratio=0.8",
                              "--sft_model_path=/x/checkpoint-3.hf_model"])
    assert args.trust_remote_code is False and args.full_ft is True  # D0: a bool flag flips the default
    assert args.lora_target_modules == ["q_proj", "v_proj"]
    assert args.rmdc == rmdata.RMDatasetConfig(dataset_name="/data/prefs", train_split_ratio=0.8)
    assert args.sft_model_path == "/x/checkpoint-3.hf_model"
    with pytest.raises(SystemExit) as exc:
        reward.parse_args(["--rmdc_split=test"])  # rebuilding the config needs --rmdc_dataset_name
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        reward.parse_args(["--hfdc_dataset_name=x"])  # the reward script has no --hfdc_*
    assert exc.value.code == 2


def test_dpo_defaults_and_flags(dpo: ModuleType, rmdata: ModuleType) -> None:
    args = dpo.parse_args([])
    assert args.sft_model_path is None and args.hf_model_id == "Qwen/Qwen3-8B"
    assert args.rmdc.dataset_name == "Anthropic/hh-rlhf"
    assert (args.beta, args.max_steps, args.per_device_batch_size, args.gradient_accumulation_steps) == \
        (0.1, 10000, 1, 8)
    assert (args.learning_rate, args.weight_decay, args.warmup_steps, args.max_grad_norm) == (5e-7, 0.01, 100, 1.0)
    assert (args.max_seq_length, args.logging_steps, args.eval_steps, args.save_steps) == (2048, 10, 100, 500)
    assert (args.early_stopping_patience, args.early_stopping_threshold, args.seed, args.num_workers) == \
        (3, 0.001, 42, 4)
    assert args.debug is False and args.use_wandb is False and args.full_ft is False
    args = dpo.parse_args(["--debug", "--beta=0.5", "--rmdc_dataset_name=d", "--rmdc_num_proc=2"])
    assert args.debug is True and args.beta == 0.5
    assert args.rmdc == rmdata.RMDatasetConfig(dataset_name="d", num_proc=2)
    for bad in (["--per_device_train_batch_size=2"], ["--bogus"]):  # the former is the reward script's name
        with pytest.raises(SystemExit) as exc:
            dpo.parse_args(bad)
        assert exc.value.code == 2


@pytest.mark.integration
def test_help_is_fast_and_unknown_flags_exit_2(scripts_dir: Path, tmp_path: Path) -> None:
    for script in ("text/reward_model_accelerate.py", "text/dpo_accelerate.py"):
        run = run_python(scripts_dir, script, ["--help"], tmp_path / "home", PYTHONPROFILEIMPORTTIME="1")
        assert run.returncode == 0 and "--rmdc_dataset_name" in run.stdout, run.describe()
        imported = {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines()
                    if line.startswith("import time:") and "|" in line}
        assert "json" in imported, run.stderr[-2000:]  # the import log is there
        assert not imported & {"torch", "transformers"}, "--help imports no torch / transformers"
        run = run_python(scripts_dir, script, ["--not_a_flag=1"], tmp_path / "home")
        assert run.returncode == 2 and "--not_a_flag" in run.stderr, run.describe()
    assert not (tmp_path / "home").exists()


def test_default_data_dir(rmdata: ModuleType, tmp_path: Path) -> None:
    assert rmdata.default_rm_data_dir(rmdata.rm_default_config(), tmp_path) == \
        tmp_path / "datasets" / "Anthropic_hh-rlhf" / "default" / "train=90%-val=5%-test=5%"


# --------------------------------------------------------------------------------------------------------------
# data preparation, tokenization, checkpoint lookup


def test_prepare_preference_data(rmdata: ModuleType, preference_dataset: Path, tmp_path: Path) -> None:
    config = rmdata.RMDatasetConfig(dataset_name=str(preference_dataset), train_split_ratio=0.8)
    data_dir = tmp_path / "prepared"
    rmdata.prepare_rm_datasets(config, data_dir, rank=0)
    parts = {name: read_jsonl(data_dir / name) for name in ("training.jsonl", "validation.jsonl", "test.jsonl")}
    assert [len(rows) for rows in parts.values()] == [96, 12, 12]
    assert (data_dir / ".data_ready").read_text() == "ready"
    source = {r["prompt"] + r["chosen"] for r in preference_data.preference_rows(120)}
    for rows in parts.values():
        for row in rows:
            assert set(row) == {"input", "chosen", "rejected"}  # "prompt" becomes "input"
            assert row["input"] + row["chosen"] in source
    # a marker means nothing is loaded, even if the source is gone
    rmdata.prepare_rm_datasets(rmdata.RMDatasetConfig(dataset_name=str(tmp_path / "gone")), data_dir, rank=0)

    rows = [{"input": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q2", "chosen": "c", "rejected": "d"},
            {"chosen": "e", "rejected": "f"}]
    assert [rmdata.convert_rm_row(r, config) for r in rows] == [
        {"input": "q", "chosen": "a", "rejected": "b"}, {"input": "q2", "chosen": "c", "rejected": "d"},
        {"chosen": "e", "rejected": "f"}]


def test_bad_preference_data_writes_nothing(rmdata: ModuleType, common: ModuleType, tmp_path: Path) -> None:
    src = tmp_path / "src"
    tiny.write_jsonl(src / "rows.jsonl", [{"prompt": "q", "chosen": "a", "answer": "b"}] * 10)
    config = rmdata.RMDatasetConfig(dataset_name=str(src))
    with pytest.raises(common.ScriptError, match=r"--rmdc_dataset_name=.*no 'chosen'/'rejected'.*answer"):
        rmdata.prepare_rm_datasets(config, tmp_path / "out" / "d", rank=0)
    assert not list((tmp_path / "out").iterdir())  # no data_dir, no temporary dir
    (src / "rows.jsonl").write_text("")
    with pytest.raises(common.ScriptError, match=r"--rmdc_dataset_name=.*empty"):
        rmdata.prepare_rm_datasets(config, tmp_path / "out" / "d", rank=0)
    with pytest.raises(common.ScriptError, match=r"--rmdc_train_split_ratio=1.0"):
        rmdata.prepare_rm_datasets(rmdata.RMDatasetConfig(dataset_name=str(src), train_split_ratio=1.0),
                                   tmp_path / "out" / "d", rank=0)
    assert not list((tmp_path / "out").iterdir())


def test_pair_tokenization(rmdata: ModuleType, tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    rows = [{"input": "### Instruction:\nRepeat the color twice.\n ### Input:\nred\n",
             "chosen": "### Response:\nred red", "rejected": "### Response:\nred"},
            {"chosen": "The cat saw a red ball", "rejected": "The cat saw a blue ball"}]
    path = tiny.write_jsonl(tmp_path / "pairs.jsonl", rows)
    rm = rmdata.RewardModelDataset(path, tok, 128)
    item = rm[0]
    assert item["input_ids_chosen"] == tok(rows[0]["input"] + rows[0]["chosen"])["input_ids"]
    assert item["input_ids_rejected"] == tok(rows[0]["input"] + rows[0]["rejected"])["input_ids"]
    assert item["attention_mask_chosen"] == [1] * len(item["input_ids_chosen"])
    assert rm[1]["input_ids_chosen"] == tok(rows[1]["chosen"])["input_ids"]  # no input: the texts as they are

    ds = rmdata.DPODataset(path, tok, 128)
    assert ds[0]["prompt_len"] == len(tok(rows[0]["input"])["input_ids"])
    chosen, rejected = tok(rows[1]["chosen"])["input_ids"], tok(rows[1]["rejected"])["input_ids"]
    assert ds[1]["prompt_len"] == rmdata.common_prefix_length(chosen, rejected) > 0
    short = rmdata.DPODataset(path, tok, 6)  # truncation eats the completion: one completion token is kept
    assert short[0]["prompt_len"] == 5 and len(short[0]["input_ids_chosen"]) == 6

    batch = rmdata.PairCollator(tok)([ds[0], ds[1]])
    width = batch["input_ids_chosen"].shape[1]
    assert width % 8 == 0 and batch["input_ids_rejected"].shape[1] == width  # one width for both sides
    assert batch["attention_mask_chosen"].sum(1).tolist() == [len(ds[0]["input_ids_chosen"]),
                                                              len(ds[1]["input_ids_chosen"])]
    assert batch["prompt_lens"].tolist() == [ds[0]["prompt_len"], ds[1]["prompt_len"]]
    for i, item in enumerate((ds[0], ds[1])):  # right padding
        n = len(item["input_ids_chosen"])
        assert batch["input_ids_chosen"][i, :n].tolist() == item["input_ids_chosen"]
        assert set(batch["input_ids_chosen"][i, n:].tolist()) <= {tok.pad_token_id}


def test_latest_converted_checkpoint(common: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    with pytest.raises(common.ScriptError, match=r"--sft_model_path not given and .* does not exist"):
        common.latest_converted_checkpoint(results, "--sft_model_path")
    for name in ("checkpoint-2.hf_model", "checkpoint-10.hf_peft", "checkpoint-10.hf_model", "checkpoint-12",
                 "checkpoint-11.merged", "final"):
        (results / name).mkdir(parents=True)
    assert common.latest_converted_checkpoint(results, "--sft_model_path").name == "checkpoint-10.hf_model"
    shutil.rmtree(results / "checkpoint-10.hf_model")
    assert common.latest_converted_checkpoint(results, "--sft_model_path").name == "checkpoint-10.hf_peft"
    for name in ("checkpoint-10.hf_peft", "checkpoint-2.hf_model"):
        shutil.rmtree(results / name)
    with pytest.raises(common.ScriptError, match=r"no converted checkpoint-<N>\.hf_model / \.hf_peft"):
        common.latest_converted_checkpoint(results, "--reward_model_path")


# --------------------------------------------------------------------------------------------------------------
# converted SFT checkpoints as shared/convert_checkpoint_to_hf.py writes them


def converted_model(tiny_model: Path, dest: Path) -> Path:
    """``checkpoint-N.hf_model``: a merged model plus tokenizer (here the tiny model itself)."""
    shutil.copytree(tiny_model, dest)
    return dest


def converted_adapter(tiny_model: Path, dest: Path, seed: int = 1) -> Path:
    """``checkpoint-N.hf_peft``: a LoRA adapter (non-zero) plus tokenizer plus ``base_model.txt``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(dest)
    (dest / "base_model.txt").write_text(str(tiny_model))
    return dest


def merged_sft(tiny_model: Path, adapter: Path) -> object:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter).merge_and_unload()


@dataclass
class Release:
    """One release's ``$HOME`` after a training step."""

    home: Path
    run: Run
    sft: Path

    def metrics(self) -> list[dict]:
        return read_jsonl(self.home / "metrics.jsonl")


# --------------------------------------------------------------------------------------------------------------
# reward model


@pytest.fixture(scope="module")
def reward_release(scripts_dir: Path, tiny_model: Path, preference_dataset: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Release:
    """2 processes, 40 steps, eval every 10, from the newest converted SFT checkpoint (found by itself)."""
    need_ml_stack()
    home = tmp_path_factory.mktemp("efs-home-reward")
    results = home / "results" / "tiny" / "llama"
    sft = converted_model(tiny_model, results / "checkpoint-5.hf_model")
    (results / "checkpoint-3.hf_model").mkdir()  # older: not chosen (and not even a model)
    (results / "checkpoint-9").mkdir()  # not converted: not chosen
    run = run_accelerate(scripts_dir, "text/reward_model_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--rmdc_dataset_name={preference_dataset}", "--rmdc_train_split_ratio=0.8",
        "--max_steps=40", "--per_device_train_batch_size=4", "--per_device_eval_batch_size=4",
        "--gradient_accumulation_steps=1", "--eval_steps=10", "--logging_steps=5", "--learning_rate=1e-3",
        "--warmup_steps=2", "--max_seq_length=64", "--num_workers=0", "--lora_rank=8"],
        home, MLRECIPE_METRICS_FILE=str(home / "metrics.jsonl"))
    assert run.returncode == 0, run.describe()
    return Release(home, run, sft)


def pair_scores(model: object, tokenizer: object, rows: list[dict]) -> list[tuple[float, float]]:
    import torch

    scores = []
    with torch.no_grad():
        for row in rows:
            pair = [row.get("input", "") + row["chosen"], row.get("input", "") + row["rejected"]]
            values = [model(**tokenizer(text, return_tensors="pt")).logits[0, 0].item() for text in pair]
            scores.append((values[0], values[1]))
    return scores


@pytest.mark.integration
def test_reward_model_learns_to_prefer_chosen(reward_release: Release, tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    home, out = reward_release.home, reward_release.home / "results" / "reward_tiny" / "llama"
    assert f"using {reward_release.sft} " in reward_release.run.stdout
    assert "accepted for compatibility" in reward_release.run.stdout  # --lora_rank given: noted, not used
    [ready] = list((home / "datasets").rglob(".data_ready"))
    assert ready.parent.name == "train=80%-val=10%-test=10%" and ready.parent.parent.name == "default"
    records = [r["metrics"] for r in reward_release.metrics() if "metrics" in r]
    losses = [m["loss"] for m in records if "loss" in m]
    evals = [m for m in records if "eval_loss" in m]
    assert len(losses) == 8 and len(evals) == 4
    assert losses[-1] < losses[0] - 0.3, losses
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"], evals
    assert evals[-1]["eval_accuracy"] >= 0.9 and evals[-1]["eval_margin"] > evals[0]["eval_margin"], evals
    # checkpoints only at evals that improve (the newest is the best), at most 2; final/ is a 1-label classifier
    steps = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    best = 10 * (1 + min(range(4), key=lambda i: evals[i]["eval_loss"]))
    assert 1 <= len(steps) <= 2 and steps[-1] == best, (steps, evals)
    assert (out / f"checkpoint-{best}" / "trainer_state.json").is_file()
    assert list((out / "logs").glob("events.out.tfevents.*"))
    final = out / "final"
    model = AutoModelForSequenceClassification.from_pretrained(final).eval()
    assert model.config.num_labels == 1 and model.config.pad_token_id is not None
    tok = AutoTokenizer.from_pretrained(final)
    train_rows = read_jsonl(ready.parent / "training.jsonl")[:30]
    torch.manual_seed(0)
    before_model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1).eval()
    before = pair_scores(before_model, tok, train_rows)
    after = pair_scores(model, tok, train_rows)
    acc_before = sum(c > r for c, r in before) / len(before)
    acc_after = sum(c > r for c, r in after) / len(after)
    assert acc_after >= 0.9 and acc_after > acc_before, (acc_before, acc_after)


# --------------------------------------------------------------------------------------------------------------
# DPO


@pytest.fixture(scope="module")
def dpo_release(scripts_dir: Path, tiny_model: Path, preference_dataset: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Release:
    """2 processes x 4 pairs x 2 accumulation, 30 steps, eval every 10, save every 15; the newest converted SFT
    checkpoint is an adapter (``.hf_peft``), merged into its base first."""
    need_ml_stack()
    home = tmp_path_factory.mktemp("efs-home-dpo")
    results = home / "results" / "tiny" / "llama"
    sft = converted_adapter(tiny_model, results / "checkpoint-6.hf_peft")
    converted_model(tiny_model, results / "checkpoint-4.hf_model")  # older
    run = run_accelerate(scripts_dir, "text/dpo_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--rmdc_dataset_name={preference_dataset}", "--rmdc_train_split_ratio=0.8",
        "--max_steps=30", "--per_device_batch_size=4", "--gradient_accumulation_steps=2", "--eval_steps=10",
        "--save_steps=15", "--logging_steps=5", "--learning_rate=2e-3", "--warmup_steps=2", "--max_seq_length=64",
        "--num_workers=0", "--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0", "--debug"],
        home, MLRECIPE_METRICS_FILE=str(home / "metrics.jsonl"))
    assert run.returncode == 0, run.describe()
    return Release(home, run, sft)


@pytest.mark.integration
def test_dpo_raises_the_margin_and_writes_the_layout(dpo_release: Release) -> None:
    out = dpo_release.home / "results" / "dpo_tiny" / "llama"
    stdout = dpo_release.run.stdout
    assert f"using {dpo_release.sft} " in stdout and "merging the SFT adapter" in stdout
    assert "debug: first pair: prompt_len" in stdout and "2 processes x 4 pairs x 2 accumulation" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["best_model", "checkpoint-15", "checkpoint-30", "final"]
    history = json.loads((out / "final" / "training_state.json").read_text())["log_history"]
    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "eval_loss" in h]
    assert [h["step"] for h in train] == [5, 10, 15, 20, 25, 30] and [h["step"] for h in evals] == [10, 20, 30]
    assert train[0]["loss"] == pytest.approx(0.69, abs=0.03)  # policy ~ reference at the start: log(2)
    assert train[-1]["loss"] < train[0]["loss"] - 0.04, train
    assert train[-1]["reward_margin"] > train[0]["reward_margin"] + 0.05, train
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] and evals[-1]["eval_accuracy"] >= 0.8, evals
    best_state = json.loads((out / "best_model" / "training_state.json").read_text())
    assert best_state["best_eval_loss"] == pytest.approx(min(e["eval_loss"] for e in evals))
    metrics = [r["metrics"] for r in read_jsonl(dpo_release.home / "metrics.jsonl")]
    assert sum("loss" in m for m in metrics) == 6 and sum("eval_loss" in m for m in metrics) == 3
    for name in ("best_model", "checkpoint-15", "checkpoint-30", "final"):
        for f in ("config.json", "model.safetensors", "tokenizer.json", "adapter/adapter_model.safetensors"):
            assert (out / name / f).is_file(), (name, f)
    assert not list(out.glob(".*"))  # no temporary directories left


@pytest.mark.integration
def test_dpo_policy_reloads_and_prefers_chosen(dpo_release: Release, dpo: ModuleType, rmdata: ModuleType,
                                               tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = dpo_release.home / "results" / "dpo_tiny" / "llama" / "final"
    policy = AutoModelForCausalLM.from_pretrained(out).eval()
    assert policy.config.use_cache is True
    reference = merged_sft(tiny_model, dpo_release.sft).eval()
    ref_state = {k: v.clone() for k, v in reference.state_dict().items()}
    got = policy.state_dict()
    assert set(got) == set(ref_state)
    changed = {k for k in got if not torch.equal(got[k], ref_state[k])}
    assert changed and all(any(t in k for t in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj")) for k in changed), changed  # only LoRA targets
    # the merged weights are the SFT model plus the saved DPO adapter
    adapter_config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str(dpo_release.sft)
    expected = PeftModel.from_pretrained(merged_sft(tiny_model, dpo_release.sft), out / "adapter") \
        .merge_and_unload().state_dict()
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, expected[name], msg=name)
    # on training pairs the policy's implicit reward margin over the reference is positive
    tok = AutoTokenizer.from_pretrained(out)
    [ready] = list((dpo_release.home / "datasets").rglob(".data_ready"))
    ds = rmdata.DPODataset(ready.parent / "training.jsonl", tok, 64, max_samples=32)
    batch = rmdata.PairCollator(tok)([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        pol_c, pol_r = dpo.pair_logps(policy, batch)
        ref_c, ref_r = dpo.pair_logps(reference, batch)
    margins = (pol_c - ref_c) - (pol_r - ref_r)
    assert (margins > 0).float().mean() >= 0.8 and margins.mean() > 0.5, margins


@pytest.mark.integration
def test_plain_python_full_ft_and_adapter_source(scripts_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    """One process without the launcher: DPO with --full_ft and no validation rows; the reward model from an
    adapter (``.hf_peft``) SFT checkpoint, merged into its base."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    need_ml_stack()
    data_dir = tmp_path / "data"
    rows = [{"input": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]}
            for r in preference_data.preference_rows(24)]
    tiny.write_jsonl(data_dir / "training.jsonl", rows[:20])
    tiny.write_jsonl(data_dir / "validation.jsonl", [])
    tiny.write_jsonl(data_dir / "test.jsonl", rows[20:])
    (data_dir / ".data_ready").write_text("ready")
    home = tmp_path / "home"
    run = run_python(scripts_dir, "text/dpo_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--sft_model_path={tiny_model}", f"--data_dir={data_dir}", "--full_ft",
        "--max_steps=6", "--per_device_batch_size=2", "--gradient_accumulation_steps=1", "--logging_steps=3",
        "--save_steps=4", "--learning_rate=1e-3", "--warmup_steps=0", "--num_workers=0"], home)
    assert run.returncode == 0, run.describe()
    assert "validation split is empty" in run.stdout and "1 process x 2 pairs" in run.stdout
    out = home / "results" / "dpo_tiny" / "llama"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4", "final"]  # no eval: no best_model/
    assert not (out / "final" / "adapter").exists()
    key = "model.embed_tokens.weight"  # full fine-tuning: not only the LoRA targets change
    trained = AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
    assert not torch.equal(trained[key], AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()[key])

    adapter = converted_adapter(tiny_model, home / "results" / "tiny" / "llama" / "checkpoint-1.hf_peft")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # no tokenizer: it comes from base_model.txt's model
        (adapter / name).unlink()
    run = run_python(scripts_dir, "text/reward_model_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--data_dir={data_dir}", "--max_steps=4", "--per_device_train_batch_size=4",
        "--gradient_accumulation_steps=1", "--logging_steps=2", "--eval_steps=2", "--num_workers=0"], home)
    assert run.returncode == 0, run.describe()
    assert f"using {adapter} " in run.stdout and "merging the SFT adapter" in run.stdout
    out = home / "results" / "reward_tiny" / "llama"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]  # saved each eval_steps
    model = AutoModelForSequenceClassification.from_pretrained(out / "final")
    key = "model.layers.0.self_attn.q_proj.weight"
    merged = merged_sft(tiny_model, adapter).state_dict()[key]
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()[key]
    assert not torch.equal(merged, base)
    assert (model.state_dict()[key] - merged).abs().max() < (model.state_dict()[key] - base).abs().max()


# --------------------------------------------------------------------------------------------------------------
# bad input: one error line naming the flag or path, exit 1, nothing written


@pytest.mark.integration
def test_no_converted_sft_checkpoint(scripts_dir: Path, tmp_path: Path, preference_dataset: Path) -> None:
    home = tmp_path / "home"
    results = home / "results" / "tiny" / "llama"
    for script in ("text/reward_model_accelerate.py", "text/dpo_accelerate.py"):
        run = run_python(scripts_dir, script, [f"--hf_model_id={MODEL_ID}",
                                               f"--rmdc_dataset_name={preference_dataset}"], home)
        assert_error(run, "--sft_model_path not given", str(results), "does not exist",
                     "convert_checkpoint_to_hf.py")
    (results / "checkpoint-8").mkdir(parents=True)  # a training checkpoint, not converted
    run = run_python(scripts_dir, "text/dpo_accelerate.py", [f"--hf_model_id={MODEL_ID}"], home)
    assert_error(run, "--sft_model_path not given", "no converted checkpoint")
    assert sorted(p.name for p in home.rglob("*")) == ["checkpoint-8", "llama", "results", "tiny"]


@pytest.mark.integration
def test_sft_model_path_that_is_not_a_model(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    not_a_model = tmp_path / "checkpoint-1.hf_model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("no weights")
    adapter = tmp_path / "checkpoint-2.hf_peft"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "base_model.txt").write_text(str(tmp_path / "missing-base"))
    for script in ("text/reward_model_accelerate.py", "text/dpo_accelerate.py"):
        run = run_python(scripts_dir, script, [f"--sft_model_path={not_a_model}"], home)
        assert_error(run, f"--sft_model_path={not_a_model}", "not a model directory")
        run = run_python(scripts_dir, script, [f"--sft_model_path={tmp_path / 'nope'}"], home)
        assert_error(run, f"--sft_model_path={tmp_path / 'nope'}", "no such directory")
    data_dir = tmp_path / "data"
    tiny.write_jsonl(data_dir / "training.jsonl", preference_data.preference_rows(4))
    for name in ("validation.jsonl", "test.jsonl"):
        (data_dir / name).write_text("")
    (data_dir / ".data_ready").write_text("ready")
    run = run_python(scripts_dir, "text/dpo_accelerate.py", [f"--sft_model_path={adapter}", f"--data_dir={data_dir}",
                                                             f"--output_dir={tmp_path / 'out'}"], home)
    assert_error(run, str(adapter / "base_model.txt"), str(tmp_path / "missing-base"), "no such directory")
    run = run_python(scripts_dir, "text/dpo_accelerate.py", [f"--sft_model_path={tiny_model}", "--beta=0"], home)
    assert_error(run, "--beta=0")
    assert not home.exists() and not (tmp_path / "out").exists()


@pytest.mark.integration
def test_bad_preference_dataset(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "pairs.jsonl").write_text("")
    run = run_python(scripts_dir, "text/dpo_accelerate.py",
                     [f"--sft_model_path={tiny_model}", f"--rmdc_dataset_name={empty}"], home)
    assert_error(run, f"--rmdc_dataset_name={empty}", "empty")
    wrong = tmp_path / "wrong"
    tiny.write_jsonl(wrong / "rows.jsonl", tiny.instruction_rows(12))  # SFT rows, not pairs
    run = run_python(scripts_dir, "text/reward_model_accelerate.py",
                     [f"--sft_model_path={tiny_model}", f"--rmdc_dataset_name={wrong}"], home)
    assert_error(run, f"--rmdc_dataset_name={wrong}", "'chosen'/'rejected'", "instruction")
    assert not list(home.rglob(".data_ready")) and not list(home.rglob("*.jsonl"))
    assert not (home / "results").exists()
