"""RLHF with PPO (dense per-token KL rewards plus the reward model's score) in an Accelerator loop.

Run it under ``accelerate launch`` (any accelerate config) or plain ``python``. Flags are the fields of
:class:`ScriptArguments` (family D0): only the flags given override the defaults; a boolean flag flips its
default; ``--hfdc_*`` rebuild the prompt dataset config (then ``--hfdc_dataset_name`` is required). Only the
``input`` field of ``training.jsonl`` is used, as the prompts.

Models: the policy starts from ``--sft_model_path`` (default: the newest converted checkpoint
``$HOME/results/<hf_model_id>/checkpoint-N.hf_model|.hf_peft``; an adapter is merged first) and gets a new LoRA
adapter unless ``--full_ft``, plus a value head (``Linear(hidden, 1, bias=False)``) on its last hidden state. The
frozen reference (the SFT model) and the reward model (``--reward_model_path``, a ``num_labels=1`` sequence
classifier such as ``reward_model_accelerate.py``'s ``final/``; default: the newest converted checkpoint under
``$HOME/results/reward_<hf_model_id>``) run on the CPU in fp32, as in the reference.

Each of the ``--max_steps`` iterations: generate completions for a batch of prompts (rollouts), score them (reward
at the last generated token, ``-kl_coef * (log pi - log ref)`` on every generated token), compute GAE advantages
(``gamma``, ``lam``; whitened) and returns, then ``--ppo_epochs`` optimizer steps on the clipped PPO objective
plus ``vf_coef`` * value loss minus ``entropy_coef`` * entropy, stopping the epochs early when the approximate KL
(averaged over the processes) exceeds ``--target_kl``. ``--num_rollouts`` and ``--gradient_accumulation_steps``
are accepted and not used (as in the reference: each PPO epoch is one optimizer step on the rollout batch).

Rollouts: the reference generates with vLLM inside a detached Ray actor (``vllm_inference_actor``, tensor
parallel ``--vllm_tensor_parallel_size``), loaded once from the SFT model. That path is taken when CUDA, ``vllm``
and ``ray`` are all available. Otherwise (e.g. on a CPU box) completions are generated with Hugging Face
``generate`` from the current policy, and a log line says so. ``MLRECIPE_PPO_GENERATOR=vllm|transformers``
forces one.

Writes ``<output_dir>/checkpoint-<update>/`` every ``--save_steps`` optimizer updates and ``<output_dir>/final/``
(default output_dir ``$HOME/results/ppo_<hf_model_id>``): the policy's ``save_pretrained`` (a PEFT adapter with
LoRA, relative to the SFT model named in ``base_model.txt``; the full model with ``--full_ft``), ``value_head.pt``
(state dict ``{"value_head.weight": [1, hidden]}``), the tokenizer and ``training_state.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    atomic_dir,
    build_from_namespace,
    check_pretrained_dir,
    comma_list,
    dataclass_parser,
    is_main_process,
    is_peft_dir,
    latest_converted_checkpoint,
    load_sft_model,
    load_tokenizer,
    log,
    offline_defaults,
    peft_base_model,
    resolve_sft_model_path,
    results_dir,
    run_main,
    select_precision,
    sft_tokenizer_source,
    short_error,
)
from mlrecipe_scripts.hf_trainer.text_dataset import (
    HFDC_NOT_ON_CLI,
    HFDatasetConfig,
    default_data_dir,
    prepare_datasets,
    read_jsonl,
    sft_default_config,
)

GENERATOR_VAR = "MLRECIPE_PPO_GENERATOR"
RAY_NAMESPACE = "ppo_training"
VLLM_ACTOR_NAME = "vllm_inference_actor"


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``hfdc`` becomes ``--hfdc_<field>``)."""

    sft_model_path: str | None = None
    reward_model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
    trust_remote_code: bool = True
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    hfdc: HFDatasetConfig = field(default_factory=sft_default_config)
    ppo_epochs: int = 4
    num_rollouts: int = 128
    max_steps: int = 1000
    per_device_batch_size: int = 1
    gradient_accumulation_steps: int = 8
    learning_rate: float = 1e-5
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    clip_range: float = 0.2
    vf_coef: float = 1.0
    kl_coef: float = 0.02
    gamma: float = 1.0
    lam: float = 0.95
    entropy_coef: float = 0.01
    target_kl: float = 0.015
    max_new_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.9
    vllm_tensor_parallel_size: int = 8
    vllm_gpu_memory_utilization: float = 0.10
    max_seq_length: int = 2048
    data_dir: str | None = None
    output_dir: str | None = None
    logging_steps: int = 10
    save_steps: int = 100
    use_wandb: bool = False
    seed: int = 42
    num_workers: int = 4


NESTED = {"hfdc": (HFDatasetConfig, HFDC_NOT_ON_CLI)}


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def check_numbers(args: ScriptArguments) -> None:
    """Values that cannot work, reported before anything is loaded."""
    for name in ("ppo_epochs", "max_steps", "per_device_batch_size", "max_new_tokens", "max_seq_length",
                 "logging_steps", "save_steps", "vllm_tensor_parallel_size"):
        if getattr(args, name) < 1:
            raise ScriptError(f"--{name}={getattr(args, name)}: must be at least 1")
    if not 0 < args.top_p <= 1:
        raise ScriptError(f"--top_p={args.top_p}: must be in (0, 1]")
    if args.clip_range <= 0:
        raise ScriptError(f"--clip_range={args.clip_range}: must be positive")
    if not args.full_ft and not args.lora_target_modules:
        raise ScriptError("--lora_target_modules: empty list")


def resolve_reward_model_path(args: ScriptArguments) -> str:
    """``--reward_model_path`` validated, or the newest converted checkpoint under ``results/reward_<id>``."""
    if args.reward_model_path:
        return check_pretrained_dir(args.reward_model_path, "--reward_model_path")
    found = latest_converted_checkpoint(results_dir(f"reward_{args.hf_model_id}"), "--reward_model_path")
    log(f"--reward_model_path not given: using {found}")
    return check_pretrained_dir(str(found), "--reward_model_path")


def choose_generator() -> tuple[str, str]:
    """("vllm" or "transformers", why): vLLM in a Ray actor when CUDA, vllm and ray are there (the reference)."""
    forced = os.environ.get(GENERATOR_VAR, "").strip().lower()
    if forced and forced not in ("vllm", "transformers"):
        raise ScriptError(f"{GENERATOR_VAR}={forced}: must be 'vllm' or 'transformers'")
    missing = [name for name in ("vllm", "ray") if importlib.util.find_spec(name) is None]
    import torch

    if forced == "vllm":
        if missing:
            raise ScriptError(f"{GENERATOR_VAR}=vllm: {', '.join(missing)} not installed")
        return "vllm", f"forced by {GENERATOR_VAR}"
    if forced == "transformers":
        return "transformers", f"forced by {GENERATOR_VAR}"
    if not torch.cuda.is_available():
        return "transformers", "no CUDA device"
    if missing:
        return "transformers", f"{' and '.join(missing)} not installed"
    return "vllm", "CUDA, vllm and ray available"


# --------------------------------------------------------------------------------------------------------------
# data


class PromptDataset:
    """The ``input`` of every row of a jsonl file, tokenized (special tokens on, truncated to ``max_length``)."""

    def __init__(self, path: Path, tokenizer: Any, max_length: int):
        self.path = path
        if not path.is_file():
            raise ScriptError(f"{path}: no such file (is --data_dir complete?)")
        rows = read_jsonl(path)
        for number, row in enumerate(rows, 1):
            if not isinstance(row, dict) or "input" not in row:
                raise ScriptError(f"{path}: row {number} has no 'input' (PPO uses it as the prompt)")
        self.prompts = [str(row["input"] or "") for row in rows]
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        ids = self.tokenizer(self.prompts[index], truncation=True, max_length=self.max_length)["input_ids"]
        return {"input_ids": list(ids), "prompt_text": self.prompts[index]}


class PromptCollator:
    """Left-pads prompt ids (for generation) and keeps the prompt texts."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            if n:
                ids[i, width - n:] = torch.tensor(f["input_ids"], dtype=torch.long)
                mask[i, width - n:] = 1
        return {"input_ids": ids, "attention_mask": mask, "prompt_texts": [f["prompt_text"] for f in features]}


# --------------------------------------------------------------------------------------------------------------
# models


def make_policy_with_value(policy: Any, hidden_size: int, dtype: Any) -> Any:
    """``PolicyWithValue``: the policy plus ``value_head.value_head`` (Linear(hidden, 1, bias=False), N(0, 0.01))."""
    import torch
    from torch import nn

    class ValueHead(nn.Module):
        """V(s) from a hidden state."""

        def __init__(self) -> None:
            super().__init__()
            self.value_head = nn.Linear(hidden_size, 1, bias=False, dtype=dtype)
            with torch.no_grad():
                self.value_head.weight.normal_(std=0.01)

        def forward(self, hidden: Any) -> Any:
            return self.value_head(hidden).squeeze(-1)

    class PolicyWithValue(nn.Module):
        """One forward pass: token logits and per-position values (from the last hidden state)."""

        def __init__(self) -> None:
            super().__init__()
            self.policy = policy
            self.value_head = ValueHead()

        def forward(self, input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
            out = self.policy(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
            hidden = out.hidden_states[-1]
            return out.logits, self.value_head(hidden.to(self.value_head.value_head.weight.dtype))

    return PolicyWithValue()


def add_lora(policy: Any, args: ScriptArguments, sft_path: str) -> Any:
    """A new LoRA adapter (default init: ``lora_B`` zero) on the policy; its base is the SFT model."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=list(args.lora_target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        policy = get_peft_model(policy, config)
    except ValueError as exc:
        raise ScriptError(f"--lora_target_modules={','.join(args.lora_target_modules)}: {short_error(exc)}") from exc
    policy.peft_config["default"].base_model_name_or_path = sft_path
    policy.enable_input_require_grads()
    return policy


def frozen(model: Any) -> Any:
    """Eval mode, dropout off, no gradients."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


# --------------------------------------------------------------------------------------------------------------
# rollouts


class HFGenerator:
    """Completions from the current policy with ``transformers`` ``generate`` (sampling unless temperature <= 0)."""

    name = "transformers"

    def __init__(self, args: ScriptArguments, tokenizer: Any):
        self.args = args
        self.tokenizer = tokenizer

    def generate(self, model: Any, batch: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
        """[(prompt ids, generated ids)] per prompt; generation ends at (and keeps) the eos token."""
        import torch

        ids, mask = batch["input_ids"], batch["attention_mask"]
        room = self.args.max_seq_length - ids.shape[1]
        max_new = max(1, min(self.args.max_new_tokens, room))
        sampling = self.args.temperature > 0
        kwargs = {"do_sample": sampling, "max_new_tokens": max_new, "use_cache": True,
                  "pad_token_id": self.tokenizer.pad_token_id, "eos_token_id": self.tokenizer.eos_token_id}
        if sampling:
            kwargs.update(temperature=self.args.temperature, top_p=self.args.top_p, top_k=0)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        results = []
        eos = self.tokenizer.eos_token_id
        for i in range(ids.shape[0]):
            prompt = ids[i][mask[i].bool()].tolist()
            gen = out[i, ids.shape[1]:].tolist()
            if eos is not None and eos in gen:
                gen = gen[: gen.index(eos) + 1]
            results.append((prompt, gen or [eos if eos is not None else self.tokenizer.pad_token_id]))
        return results


class VLLMGenerator:
    """The reference's rollouts: one detached Ray actor running ``vllm.LLM`` on the SFT model (never re-synced
    with the policy, as in the reference). Not exercised on CPU boxes."""

    name = "vllm"

    def __init__(self, accelerator: Any, args: ScriptArguments, sft_path: str, tokenizer: Any):
        import ray

        self.ray = ray
        self.args = args
        self.tokenizer = tokenizer
        self.actor: Any  # a Ray actor handle of _VLLMActor
        if accelerator.is_main_process:
            from mlrecipe_scripts import import_root

            # the actor imports mlrecipe_scripts: give the Ray workers this tree's import path
            path = os.pathsep.join(p for p in (import_root(), os.environ.get("PYTHONPATH", "")) if p)
            ray.init(ignore_reinit_error=True, num_gpus=accelerator.num_processes, namespace=RAY_NAMESPACE,
                     _temp_dir="/tmp/ray", include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
            actor_cls = ray.remote(_VLLMActor)
            self.actor = actor_cls.options(num_gpus=args.vllm_tensor_parallel_size, name=VLLM_ACTOR_NAME,
                                           lifetime="detached").remote(
                sft_path, args.hf_model_id, args.vllm_tensor_parallel_size, args.vllm_gpu_memory_utilization,
                args.seed)
            ray.get(self.actor.generate.remote([[tokenizer.bos_token_id or 0]], {"max_tokens": 1}))
        accelerator.wait_for_everyone()
        if not accelerator.is_main_process:
            ray.init(address="auto", namespace=RAY_NAMESPACE, ignore_reinit_error=True)
            self.actor = ray.get_actor(VLLM_ACTOR_NAME)
        accelerator.wait_for_everyone()

    def generate(self, model: Any, batch: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
        """[(prompt ids, generated ids)] per prompt, from the actor."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        prompts = [ids[i][mask[i].bool()].tolist() for i in range(ids.shape[0])]
        sampling = {"temperature": max(self.args.temperature, 0.0), "top_p": self.args.top_p,
                    "max_tokens": self.args.max_new_tokens}
        generated = self.ray.get(self.actor.generate.remote(prompts, sampling))
        fallback = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        return [(p, g or [fallback]) for p, g in zip(prompts, generated, strict=True)]

    def close(self, accelerator: Any) -> None:
        """Remove the actor's temporary model and shut Ray down (main process)."""
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            try:
                self.ray.get(self.actor.cleanup.remote())
                self.ray.kill(self.actor)
            except (self.ray.exceptions.RayError, OSError, ValueError) as exc:  # cleanup is best effort
                log(f"note: cannot clean up the vLLM actor ({short_error(exc)})")
        self.ray.shutdown()


class _VLLMActor:
    """Runs inside Ray: ``vllm.LLM`` (eager, max_model_len 4096) on the SFT model (an adapter merged first)."""

    def __init__(self, sft_path: str, hf_model_id: str, tensor_parallel_size: int, memory_utilization: float,
                 seed: int):
        import tempfile

        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                     "TORCHELASTIC_USE_AGENT_STORE"):
            os.environ.pop(name, None)
        from vllm import LLM

        self.tmp = None
        path = sft_path
        if is_peft_dir(sft_path):
            self.tmp = tempfile.mkdtemp(prefix="vllm_merged_model_")
            merged = load_sft_model(sft_path, "--sft_model_path", hf_model_id, dtype="auto", device_map="cpu")
            merged.save_pretrained(self.tmp)
            tok_path, tok_flag = sft_tokenizer_source(sft_path, hf_model_id)
            load_tokenizer(tok_path, flag=tok_flag).save_pretrained(self.tmp)
            path = self.tmp
            del merged
        self.llm = LLM(model=path, tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=memory_utilization,
                       dtype="bfloat16", trust_remote_code=True, seed=seed, enforce_eager=True, max_model_len=4096,
                       disable_custom_all_reduce=True)

    def generate(self, prompts: list[list[int]], sampling: dict[str, Any]) -> list[list[int]]:
        from vllm import SamplingParams

        try:
            from vllm.inputs import TokensPrompt

            inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        except ImportError:
            inputs = [{"prompt_token_ids": p} for p in prompts]
        outputs = self.llm.generate(inputs, SamplingParams(**sampling))
        return [list(o.outputs[0].token_ids) for o in outputs]

    def cleanup(self) -> bool:
        import shutil

        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return True


def pack_rollouts(rollouts: list[tuple[list[int], list[int]]], pad_id: int, device: Any) -> dict[str, Any]:
    """Right-padded ``prompt + completion`` sequences, their attention mask and the completion mask (over the
    label positions 1..L-1, i.e. aligned with ``logits[:, :-1]``)."""
    import torch

    width = max(len(p) + len(g) for p, g in rollouts)
    ids = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    gen = torch.zeros_like(ids)
    for i, (prompt, completion) in enumerate(rollouts):
        seq = prompt + completion
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[i, : len(seq)] = 1
        gen[i, len(prompt): len(seq)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "gen_mask": gen[:, 1:].to(device),
            "lengths": [len(g) for _, g in rollouts]}


def token_logps(logits: Any, labels: Any) -> Any:
    """log p(label) per position from logits [B, T, V] and labels [B, T]."""
    import torch

    logits = logits.float()
    return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def gae(rewards: Any, values: Any, mask: Any, gamma: float, lam: float) -> tuple[Any, Any]:
    """Generalized advantage estimation over the masked (generated) positions of each row; (advantages, returns)."""
    import torch

    advantages = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        positions = mask[i].nonzero(as_tuple=True)[0].tolist()
        last = 0.0
        for j in reversed(range(len(positions))):
            t = positions[j]
            next_value = values[i, positions[j + 1]] if j + 1 < len(positions) else 0.0
            delta = rewards[i, t] + gamma * next_value - values[i, t]
            last = delta + gamma * lam * last
            advantages[i, t] = last
    returns = (advantages + values) * mask
    return advantages * mask, returns


def masked_mean(values: Any, mask: Any) -> Any:
    """Mean of ``values`` where ``mask`` is 1."""
    return (values * mask).sum() / (mask.sum() + 1e-8)


# --------------------------------------------------------------------------------------------------------------
# the loop


def save_policy(accelerator: Any, model: Any, tokenizer: Any, path: Path, args: ScriptArguments, sft_path: str,
                state: dict[str, Any]) -> None:
    """Write ``path``: policy ``save_pretrained`` + ``value_head.pt`` + tokenizer (+ ``base_model.txt`` with LoRA).
    Called on every rank."""
    import torch

    full = accelerator.get_state_dict(model)  # a collective under FSDP / DeepSpeed
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        policy_state = {k.removeprefix("policy."): v for k, v in full.items() if k.startswith("policy.")}
        value_state = {k.removeprefix("value_head."): v.detach().cpu() for k, v in full.items()
                       if k.startswith("value_head.")}
        config = getattr(unwrapped.policy, "config", None)
        use_cache = getattr(config, "use_cache", None)
        with atomic_dir(path) as tmp:
            if config is not None:
                config.use_cache = True
            try:
                unwrapped.policy.save_pretrained(str(tmp), state_dict=policy_state)
            finally:
                if config is not None:
                    config.use_cache = use_cache
            torch.save(value_state, tmp / "value_head.pt")
            tokenizer.save_pretrained(str(tmp))
            if not args.full_ft:
                (tmp / "base_model.txt").write_text(sft_path)
            (tmp / "training_state.json").write_text(json.dumps(state, indent=2))
        log(f"saved {path}")
    accelerator.wait_for_everyone()


def mean_across(accelerator: Any, values: dict[str, float]) -> dict[str, float]:
    """The mean of each value over the processes (a collective)."""
    import torch

    keys = sorted(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    return dict(zip(keys, accelerator.reduce(tensor, reduction="mean").tolist(), strict=True))


def train(args: ScriptArguments, sft_path: str, reward_path: str, data_dir: Path, output_dir: Path) -> dict[str, Any]:
    """Rollouts, scoring, GAE and PPO updates; returns the training state written with the models."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, Dataset
    from transformers import get_cosine_schedule_with_warmup

    from mlrecipe_scripts.core.progress import report_progress

    generator_kind, why = choose_generator()
    accelerator = Accelerator()
    set_seed(args.seed)
    main = accelerator.is_main_process
    precision = select_precision()
    wandb = None
    if args.use_wandb and main:
        import wandb as _wandb

        wandb = _wandb
        wandb.init(project="ppo-training-dense", config={k: v for k, v in asdict(args).items() if k != "hfdc"})

    tok_path, tok_flag = sft_tokenizer_source(sft_path, args.hf_model_id)
    tokenizer = load_tokenizer(tok_path, args.trust_remote_code, padding_side="left", flag=tok_flag)
    prompts = PromptDataset(data_dir / "training.jsonl", tokenizer, args.max_seq_length)
    if len(prompts) == 0:
        raise ScriptError(f"{prompts.path}: no training rows (no prompts)")
    loader = DataLoader(cast("Dataset[dict[str, Any]]", prompts), batch_size=args.per_device_batch_size,
                        shuffle=True, num_workers=args.num_workers, collate_fn=PromptCollator(tokenizer.pad_token_id))
    if main:
        log(f"data {data_dir}: {len(prompts)} prompts")
        log("note: --num_rollouts and --gradient_accumulation_steps are accepted and not used: each PPO epoch is "
            "one optimizer step on the rollout batch (as in the reference)")

    load: dict[str, Any] = {"dtype": precision.dtype, "attn_implementation": precision.attn_implementation,
            "trust_remote_code": args.trust_remote_code, "use_cache": False}
    if main:
        log(f"policy from {sft_path}: {precision.describe()}; "
            f"{'full fine-tuning' if args.full_ft else f'new LoRA r={args.lora_rank}'}")
    policy = load_sft_model(sft_path, "--sft_model_path", args.hf_model_id, **load)
    policy.config.use_cache = False
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hidden_size = policy.config.get_text_config().hidden_size if hasattr(policy.config, "get_text_config") else \
        policy.config.hidden_size
    if not args.full_ft:
        policy = add_lora(policy, args, sft_path)
    model = make_policy_with_value(policy, hidden_size, precision.dtype)
    cpu: dict[str, Any] = {"dtype": torch.float32, "attn_implementation": "eager",
                           "trust_remote_code": args.trust_remote_code}
    if main:
        log("reference (SFT) and reward models: CPU, fp32, eager attention (as in the reference)")
    reference = frozen(load_sft_model(sft_path, "--sft_model_path", args.hf_model_id, **cpu))
    reward_model = frozen(load_sft_model(reward_path, "--reward_model_path", args.hf_model_id,
                                         "AutoModelForSequenceClassification", num_labels=1, **cpu))
    if getattr(reward_model.config, "num_labels", 1) != 1:
        raise ScriptError(f"--reward_model_path={reward_path}: a reward model has 1 label "
                          f"(this one has {reward_model.config.num_labels})")
    if reward_model.config.pad_token_id is None:
        reward_model.config.pad_token_id = tokenizer.pad_token_id

    trainable = [p for p in model.parameters() if p.requires_grad]
    updates_total = args.max_steps * args.ppo_epochs
    optimizer = torch.optim.AdamW(trainable, lr=args.learning_rate, weight_decay=args.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, args.warmup_steps, updates_total)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if main:
        count, total = sum(p.numel() for p in trainable), sum(p.numel() for p in model.parameters())
        log(f"trainable {count:,} / total {total:,} ({100 * count / max(total, 1):.2f}%)")

    if generator_kind == "vllm":
        if main:
            log(f"rollouts: vLLM in the Ray actor {VLLM_ACTOR_NAME} (TP {args.vllm_tensor_parallel_size}), "
                f"loaded once from {sft_path} ({why})")
        generator: Any = VLLMGenerator(accelerator, args, sft_path, tokenizer)
    else:
        if main:
            log(f"rollouts: Hugging Face generate with the current policy on {accelerator.device} "
                f"(CPU fallback for the reference's vLLM-in-Ray rollouts: {why})")
        generator = HFGenerator(args, tokenizer)

    state: dict[str, Any] = {"step": 0, "updates": 0, "max_steps": args.max_steps, "generator": generator.name,
                             "log_history": []}
    update, epoch = 0, 0
    batches = iter(loader)
    pad_id = tokenizer.pad_token_id
    for iteration in range(1, args.max_steps + 1):
        try:
            batch = next(batches)
        except StopIteration:
            epoch += 1
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            batches = iter(loader)
            batch = next(batches)

        # 1. experience: completions, rewards, old log-probs, reference log-probs, values
        unwrapped = accelerator.unwrap_model(model)
        model.eval()
        rollouts = generator.generate(unwrapped.policy, batch)
        packed = pack_rollouts(rollouts, pad_id, accelerator.device)
        ids, mask, gen_mask = packed["input_ids"], packed["attention_mask"], packed["gen_mask"].float()
        labels = ids[:, 1:]
        with torch.no_grad():
            logits, values = model(ids, mask)
            old_logps = token_logps(logits[:, :-1], labels)
            values = values[:, :-1].float()
            ids_cpu, mask_cpu = ids.cpu(), mask.cpu()
            ref_logps = token_logps(reference(input_ids=ids_cpu, attention_mask=mask_cpu).logits[:, :-1],
                                    labels.cpu()).to(accelerator.device)
            scores = reward_model(input_ids=ids_cpu, attention_mask=mask_cpu).logits.squeeze(-1).float()
            scores = scores.to(accelerator.device)
            kl = old_logps - ref_logps
            rewards = -args.kl_coef * kl * gen_mask
            last = (gen_mask * torch.arange(gen_mask.shape[1], device=gen_mask.device)).argmax(dim=1)
            rewards[torch.arange(rewards.shape[0], device=rewards.device), last] += scores
            rewards = rewards * gen_mask
            # 2. advantages
            advantages, returns = gae(rewards, values, gen_mask, args.gamma, args.lam)
            valid = advantages[gen_mask.bool()]
            if valid.numel() > 1:
                advantages = (advantages - valid.mean()) / (valid.std() + 1e-8) * gen_mask
        model.train()

        # 3. PPO epochs on this batch
        for ppo_epoch in range(args.ppo_epochs):
            logits, new_values = model(ids, mask)
            logps = token_logps(logits[:, :-1], labels)
            new_values = new_values[:, :-1].float()
            ratio = torch.exp(logps - old_logps)
            clipped = torch.clamp(ratio, 1 - args.clip_range, 1 + args.clip_range)
            policy_loss = masked_mean(-torch.min(ratio * advantages, clipped * advantages), gen_mask)
            value_loss = masked_mean((new_values - returns) ** 2, gen_mask)
            log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            entropy = masked_mean(-(log_probs.exp() * log_probs).sum(-1), gen_mask)
            loss = policy_loss + args.vf_coef * value_loss - args.entropy_coef * entropy
            accelerator.backward(loss)
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            update += 1
            with torch.no_grad():
                approx_kl = masked_mean(old_logps - logps.detach(), gen_mask)
            record = {"reward_score": float(scores.mean()), "kl": float(masked_mean(kl, gen_mask)),
                      "dense_reward": float(masked_mean(rewards, gen_mask)),
                      "advantage": float(masked_mean(advantages, gen_mask)), "policy_loss": float(policy_loss.detach()),
                      "value_loss": float(value_loss.detach()), "entropy": float(entropy.detach()),
                      "ratio": float(masked_mean(ratio.detach(), gen_mask)), "approx_kl": float(approx_kl),
                      "grad_norm": float(grad_norm), "response_length": sum(packed["lengths"]) / len(rollouts)}
            record = mean_across(accelerator, record)
            if update % args.logging_steps == 0:
                record["learning_rate"] = scheduler.get_last_lr()[0]
                state["log_history"].append({"step": iteration, "update": update, **record})
                if main:
                    log(f"step {iteration}/{args.max_steps} update {update} | reward {record['reward_score']:.4f} | "
                        f"kl {record['kl']:.4f} | policy loss {record['policy_loss']:.4f} | "
                        f"value loss {record['value_loss']:.4f} | entropy {record['entropy']:.3f} | "
                        f"ratio {record['ratio']:.4f} | approx kl {record['approx_kl']:.4f}")
                    report_progress(iteration, args.max_steps, **record)
                    if wandb is not None:
                        wandb.log(record | {"global_step": update})
            if update % args.save_steps == 0:
                state.update(step=iteration, updates=update)
                save_policy(accelerator, model, tokenizer, output_dir / f"checkpoint-{update}", args, sft_path, state)
            if record["approx_kl"] > args.target_kl:
                if main and ppo_epoch < args.ppo_epochs - 1:
                    log(f"  PPO epochs stopped at {ppo_epoch + 1}/{args.ppo_epochs}: approx KL "
                        f"{record['approx_kl']:.4f} > --target_kl={args.target_kl}")
                break
    state.update(step=args.max_steps, updates=update)
    if isinstance(generator, VLLMGenerator):
        generator.close(accelerator)
    save_policy(accelerator, model, tokenizer, output_dir / "final", args, sft_path, state)
    if wandb is not None:
        wandb.finish()
    accelerator.end_training()
    return state


def main(argv: list[str] | None = None) -> int:
    """Validate the inputs, prepare the prompts, train and save; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    os.environ.setdefault("NCCL_TIMEOUT", "3600")
    os.environ.setdefault("NCCL_BLOCKING_WAIT", "1")
    check_numbers(args)
    sft_path = resolve_sft_model_path(args.sft_model_path, args.hf_model_id)
    reward_path = resolve_reward_model_path(args)
    if is_peft_dir(reward_path):
        peft_base_model(reward_path, args.hf_model_id, "--hf_model_id")  # fail early on a missing base
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir(args.hfdc)
    output_dir = Path(args.output_dir).expanduser() if args.output_dir else results_dir(f"ppo_{args.hf_model_id}")
    if args.use_wandb and importlib.util.find_spec("wandb") is None:
        raise ScriptError("--use_wandb: the wandb package is not installed")
    poll = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5"))
    prepare_datasets(args.hfdc, data_dir, poll_seconds=poll)
    state = train(args, sft_path, reward_path, data_dir, output_dir)
    if is_main_process():
        log(f"done: {state['step']} rollout steps, {state['updates']} updates; policy in {output_dir / 'final'}")
    return 0


if __name__ == "__main__":
    run_main(main)
