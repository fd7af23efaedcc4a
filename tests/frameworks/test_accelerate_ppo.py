"""``text/ppo_accelerate.py``: the command line, the rollout / advantage helpers, and a few real PPO steps.

The reference generates rollouts with vLLM in a Ray actor; on this CPU box the script falls back to Hugging Face
``generate`` with the current policy (and says so). The integration test runs ``accelerate launch`` with 2 CPU
processes, the tiny model as the converted SFT checkpoint and a 1-label classifier on it as the converted reward
model, both found by the script under ``$HOME/results``.
"""

from __future__ import annotations

import importlib
import json
import math
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks import preference_data
from tests.frameworks.helpers import Run, need_ml_stack, run_accelerate, run_python

MODEL_ID = "tiny/llama"


@pytest.fixture(scope="module")
def ppo(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.ppo_accelerate")


def test_defaults_and_flags(ppo: ModuleType) -> None:
    args = ppo.parse_args([])
    assert args.sft_model_path is None and args.reward_model_path is None and args.hf_model_id == "Qwen/Qwen3-8B"
    assert args.hfdc.dataset_name == "cognitivecomputations/dolphin"
    assert args.hfdc.dataset_config == "flan1m-alpaca-uncensored"
    assert (args.ppo_epochs, args.num_rollouts, args.max_steps, args.per_device_batch_size) == (4, 128, 1000, 1)
    assert (args.gradient_accumulation_steps, args.learning_rate, args.weight_decay, args.warmup_steps) == \
        (8, 1e-5, 0.01, 100)
    assert (args.max_grad_norm, args.clip_range, args.vf_coef, args.kl_coef) == (1.0, 0.2, 1.0, 0.02)
    assert (args.gamma, args.lam, args.entropy_coef, args.target_kl) == (1.0, 0.95, 0.01, 0.015)
    assert (args.max_new_tokens, args.temperature, args.top_p) == (256, 0.7, 0.9)
    assert (args.vllm_tensor_parallel_size, args.vllm_gpu_memory_utilization) == (8, 0.10)
    assert (args.max_seq_length, args.logging_steps, args.save_steps, args.seed, args.num_workers) == \
        (2048, 10, 100, 42, 4)
    assert args.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    args = ppo.parse_args(["--hfdc_dataset_name=/data/prompts", "--hfdc_field_mapping={\"input\": \"question\"}",
                           "--full_ft", "--trust_remote_code", "--reward_model_path=/r"])
    assert args.hfdc.dataset_name == "/data/prompts" and args.hfdc.field_mapping == {"input": "question"}
    assert args.hfdc.dataset_config is None  # rebuilt from the class defaults
    assert args.full_ft is True and args.trust_remote_code is False and args.reward_model_path == "/r"
    for bad in (["--rmdc_dataset_name=x"], ["--hfdc_split=x"], ["--ppo_epochs=two"]):
        with pytest.raises(SystemExit) as exc:
            ppo.parse_args(bad)
        assert exc.value.code == 2


def test_generator_choice(ppo: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import torch

    from mlrecipe_scripts.accelerate.common import ScriptError

    monkeypatch.delenv(ppo.GENERATOR_VAR, raising=False)
    kind, why = ppo.choose_generator()
    if not torch.cuda.is_available():
        assert (kind, why) == ("transformers", "no CUDA device")
    monkeypatch.setenv(ppo.GENERATOR_VAR, "transformers")
    assert ppo.choose_generator()[0] == "transformers"
    monkeypatch.setenv(ppo.GENERATOR_VAR, "tgi")
    with pytest.raises(ScriptError, match=ppo.GENERATOR_VAR):
        ppo.choose_generator()
    if importlib.util.find_spec("vllm") is None:
        monkeypatch.setenv(ppo.GENERATOR_VAR, "vllm")
        with pytest.raises(ScriptError, match=r"vllm.*not installed"):
            ppo.choose_generator()


def test_rollout_packing_and_advantages(ppo: ModuleType) -> None:
    import torch

    packed = ppo.pack_rollouts([([1, 5, 6], [7, 8, 2]), ([1, 9], [2])], pad_id=0, device="cpu")
    assert packed["input_ids"].tolist() == [[1, 5, 6, 7, 8, 2], [1, 9, 2, 0, 0, 0]]
    assert packed["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    # completion mask over label positions 1..5 (what logits[:, :-1] predict)
    assert packed["gen_mask"].tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    assert packed["lengths"] == [3, 1]

    mask = packed["gen_mask"].float()
    rewards = torch.tensor([[0.0, 0.0, 0.1, 0.2, 1.0], [0.0, 0.5, 0.0, 0.0, 0.0]]) * mask
    values = torch.zeros_like(rewards)
    adv, ret = ppo.gae(rewards, values, mask, gamma=1.0, lam=1.0)
    # values zero, gamma = lam = 1: the advantage is the reward-to-go over the generated positions only
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.0, 1.3, 1.2, 1.0], [0.0, 0.5, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(ret, adv)
    values = torch.tensor([[9.0, 9.0, 0.5, 0.5, 0.5], [9.0, 0.2, 9.0, 9.0, 9.0]])
    adv, ret = ppo.gae(rewards, values, mask, gamma=0.9, lam=0.5)
    d4 = 1.0 - 0.5
    d3 = 0.2 + 0.9 * 0.5 - 0.5
    d2 = 0.1 + 0.9 * 0.5 - 0.5
    expected = [d2 + 0.45 * (d3 + 0.45 * d4), d3 + 0.45 * d4, d4]
    torch.testing.assert_close(adv[0, 2:], torch.tensor(expected))
    assert adv[0, :2].abs().sum() == 0 and adv[1].tolist()[1] == pytest.approx(0.5 - 0.2)
    torch.testing.assert_close(ret, (adv + values) * mask)


def assert_error(run: Run, *needles: str) -> None:
    assert run.returncode == 1, run.describe()
    line = run.last_error_line
    assert line.startswith("error: "), run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


@pytest.mark.integration
def test_missing_reward_model(scripts_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = run_python(scripts_dir, "text/ppo_accelerate.py", [f"--hf_model_id={MODEL_ID}",
                                                             f"--sft_model_path={tiny_model}"], home)
    assert_error(run, "--reward_model_path not given", str(home / "results" / "reward_tiny" / "llama"))
    run = run_python(scripts_dir, "text/ppo_accelerate.py", [f"--sft_model_path={tiny_model}",
                                                             f"--reward_model_path={tmp_path}"], home)
    assert_error(run, f"--reward_model_path={tmp_path}", "not a model directory")
    run = run_python(scripts_dir, "text/ppo_accelerate.py", [f"--sft_model_path={tiny_model}", "--top_p=0"], home)
    assert_error(run, "--top_p=0")
    assert not home.exists()


@pytest.fixture(scope="module")
def ppo_release(scripts_dir: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    """3 rollout batches x 2 PPO epochs on 2 processes; SFT and reward model found under ``$HOME/results``."""
    need_ml_stack()
    import torch
    from transformers import AutoModelForSequenceClassification

    home = tmp_path_factory.mktemp("efs-home-ppo")
    shutil.copytree(tiny_model, home / "results" / "tiny" / "llama" / "checkpoint-2.hf_model")
    torch.manual_seed(0)
    reward_model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1)
    reward_dir = home / "results" / "reward_tiny" / "llama" / "checkpoint-7.hf_model"
    reward_model.save_pretrained(reward_dir)
    data_dir = preference_data.make_prepared_prompt_dir(home / "prompts", n_train=24)
    run = run_accelerate(scripts_dir, "text/ppo_accelerate.py", [
        f"--hf_model_id={MODEL_ID}", f"--data_dir={data_dir}", "--max_steps=3", "--ppo_epochs=2",
        "--per_device_batch_size=2", "--max_new_tokens=8", "--logging_steps=1", "--save_steps=4",
        "--learning_rate=1e-3", "--warmup_steps=0", "--max_seq_length=96", "--num_workers=0", "--lora_rank=8",
        "--lora_alpha=16", "--target_kl=10"], home, MLRECIPE_METRICS_FILE=str(home / "metrics.jsonl"))
    assert run.returncode == 0, run.describe()
    return home, run


@pytest.mark.integration
def test_ppo_steps_on_cpu(ppo_release: tuple[Path, Run], tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    home, run = ppo_release
    sft = home / "results" / "tiny" / "llama" / "checkpoint-2.hf_model"
    assert f"using {sft} " in run.stdout
    assert f"using {home / 'results' / 'reward_tiny' / 'llama' / 'checkpoint-7.hf_model'}" in run.stdout
    assert "rollouts: Hugging Face generate with the current policy" in run.stdout
    assert "CPU fallback for the reference's vLLM-in-Ray rollouts" in run.stdout
    out = home / "results" / "ppo_tiny" / "llama"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4", "final"]
    for name in ("checkpoint-4", "final"):
        d = out / name
        for f in ("adapter_config.json", "adapter_model.safetensors", "value_head.pt", "tokenizer.json"):
            assert (d / f).is_file(), (name, f)
        assert (d / "base_model.txt").read_text() == str(sft)
    state = json.loads((out / "final" / "training_state.json").read_text())
    assert (state["step"], state["updates"], state["generator"]) == (3, 6, "transformers")
    history = state["log_history"]
    assert [h["update"] for h in history] == [1, 2, 3, 4, 5, 6]
    for h in history:
        assert all(math.isfinite(v) for v in h.values()), h
        assert 1 <= h["response_length"] <= 8
    assert history[0]["ratio"] == pytest.approx(1.0, abs=1e-3)  # the first update is on-policy
    metrics = [json.loads(line) for line in (home / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 6 and all("policy_loss" in m["metrics"] for m in metrics)
    # the value head and the new LoRA adapter (lora_B starts at zero) were trained
    value_head = torch.load(out / "final" / "value_head.pt", weights_only=True)
    assert set(value_head) == {"value_head.weight"} and tuple(value_head["value_head.weight"].shape) == (1, 64)
    adapter = load_file(out / "final" / "adapter_model.safetensors")
    lora_b = [t for k, t in adapter.items() if "lora_B" in k]
    assert lora_b and all(t.abs().sum() > 0 for t in lora_b)
    # the final adapter loads on the SFT model and generates
    tok = AutoTokenizer.from_pretrained(out / "final")
    policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sft), out / "final").eval()
    ids = tok("### Instruction:\nRepeat the color twice.\n ### Input:\nred\n", return_tensors="pt")
    with torch.no_grad():
        generated = policy.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape[1] > ids["input_ids"].shape[1]
