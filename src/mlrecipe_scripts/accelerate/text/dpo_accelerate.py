"""Direct Preference Optimization (DPO) with an Accelerator loop: a trained policy and a frozen reference model.

Run it under ``accelerate launch`` (any accelerate config) or plain ``python``. Flags are the fields of
:class:`ScriptArguments` (family D0): only the flags given override the defaults; a boolean flag flips its
default (``--full_ft`` and ``--debug`` set True, ``--trust_remote_code`` sets False); ``--rmdc_*`` rebuild the
preference dataset config (then ``--rmdc_dataset_name`` is required).

Both models start from ``--sft_model_path``, by default the newest converted SFT checkpoint
(``$HOME/results/<hf_model_id>/checkpoint-N.hf_model`` or ``.hf_peft``; an adapter is merged into its base
model first). The policy gets a new LoRA adapter (gaussian init, ``lora_B`` drawn from N(0, 0.02)) unless
``--full_ft``; the reference has dropout off and no gradients. The loss is the standard DPO loss
``-logsigmoid(beta * ((log pi(chosen) - log ref(chosen)) - (log pi(rejected) - log ref(rejected))))`` on the
summed log-probabilities of the completion tokens. AdamW and a cosine schedule with warmup (stepped once per
optimizer step). Every ``eval_steps`` the whole validation split is evaluated (all processes together); early
stopping uses ``--early_stopping_patience`` / ``--early_stopping_threshold`` on the eval loss.

Writes, under ``--output_dir`` (default ``$HOME/results/dpo_<hf_model_id>``): ``best_model/`` (at each eval that
improves), ``checkpoint-<step>/`` (every ``save_steps``) and ``final/``. Each is a plain Hugging Face model (the
LoRA merged in: ``config.json`` + ``model.safetensors`` + tokenizer, loadable with ``AutoModelForCausalLM``),
plus ``adapter/`` (the DPO LoRA adapter, relative to the SFT model) with LoRA, and ``training_state.json``.
Precision and attention follow the device (bf16 + sdpa on CUDA with bf16, fp32 + sdpa on CPU).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    atomic_dir,
    build_from_namespace,
    comma_list,
    dataclass_parser,
    is_main_process,
    load_sft_model,
    load_tokenizer,
    log,
    offline_defaults,
    resolve_sft_model_path,
    results_dir,
    run_main,
    select_precision,
    sft_tokenizer_source,
    short_error,
)
from mlrecipe_scripts.accelerate.text.rm_dataset import (
    RMDC_NOT_ON_CLI,
    DPODataset,
    PairCollator,
    RMDatasetConfig,
    default_rm_data_dir,
    prepare_rm_datasets,
    rm_default_config,
)


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``rmdc`` becomes ``--rmdc_<field>``)."""

    sft_model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
    trust_remote_code: bool = True
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    rmdc: RMDatasetConfig = field(default_factory=rm_default_config)
    beta: float = 0.1
    max_steps: int = 10000
    per_device_batch_size: int = 1
    gradient_accumulation_steps: int = 8
    learning_rate: float = 5e-7
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    max_seq_length: int = 2048
    data_dir: str | None = None
    output_dir: str | None = None
    logging_steps: int = 10
    eval_steps: int = 100
    save_steps: int = 500
    use_wandb: bool = False
    debug: bool = False
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    seed: int = 42
    num_workers: int = 4


NESTED = {"rmdc": (RMDatasetConfig, RMDC_NOT_ON_CLI)}


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def check_numbers(args: ScriptArguments) -> None:
    """Values that cannot work, reported before anything is loaded."""
    for name in ("max_steps", "per_device_batch_size", "gradient_accumulation_steps", "logging_steps",
                 "eval_steps", "save_steps", "max_seq_length"):
        if getattr(args, name) < 1:
            raise ScriptError(f"--{name}={getattr(args, name)}: must be at least 1")
    if not args.beta > 0:
        raise ScriptError(f"--beta={args.beta}: must be positive")
    if not args.full_ft and not args.lora_target_modules:
        raise ScriptError("--lora_target_modules: empty list")


# --------------------------------------------------------------------------------------------------------------
# the DPO objective


def completion_logps(model: Any, input_ids: Any, attention_mask: Any, prompt_lens: Any) -> Any:
    """Per sequence: the summed log-probability of its completion tokens (positions >= prompt_len, not padding)."""
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    labels = input_ids[:, 1:]
    token_logps = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    positions = torch.arange(1, input_ids.shape[1], device=input_ids.device)
    scored = (positions.unsqueeze(0) >= prompt_lens.unsqueeze(1)) & attention_mask[:, 1:].bool()
    return (token_logps * scored).sum(-1)


def pair_logps(model: Any, batch: dict[str, Any]) -> tuple[Any, Any]:
    """(chosen, rejected) completion log-probs from one forward pass over both sides of every pair."""
    import torch

    n = batch["input_ids_chosen"].shape[0]
    ids = torch.cat([batch["input_ids_chosen"], batch["input_ids_rejected"]])
    mask = torch.cat([batch["attention_mask_chosen"], batch["attention_mask_rejected"]])
    lens = torch.cat([batch["prompt_lens"], batch["prompt_lens"]])
    logps = completion_logps(model, ids, mask, lens)
    return logps[:n], logps[n:]


def dpo_terms(policy: Any, reference: Any, batch: dict[str, Any], beta: float) -> dict[str, Any]:
    """Per pair: ``loss``, implicit rewards ``chosen`` / ``rejected`` (beta * log-ratio) and ``margin``."""
    import torch
    import torch.nn.functional as F

    pol_c, pol_r = pair_logps(policy, batch)
    with torch.no_grad():
        ref_c, ref_r = pair_logps(reference, batch)
    chosen, rejected = beta * (pol_c - ref_c), beta * (pol_r - ref_r)
    margin = chosen - rejected
    return {"loss": -F.logsigmoid(margin), "chosen": chosen, "rejected": rejected, "margin": margin}


def summarize(terms: dict[str, Any]) -> dict[str, float]:
    """Means over pairs: loss, accuracy (margin > 0), reward margin, chosen / rejected rewards."""
    return {"loss": float(terms["loss"].mean()), "accuracy": float((terms["margin"] > 0).float().mean()),
            "reward_margin": float(terms["margin"].mean()), "reward_chosen": float(terms["chosen"].mean()),
            "reward_rejected": float(terms["rejected"].mean())}


# --------------------------------------------------------------------------------------------------------------
# models


def add_lora(policy: Any, args: ScriptArguments, sft_path: str) -> Any:
    """A new LoRA adapter on the policy: gaussian init, then ``lora_B`` re-drawn from N(0, 0.02).

    The adapter's ``base_model_name_or_path`` is the SFT model it applies to (``sft_path``).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=list(args.lora_target_modules), bias="none", task_type="CAUSAL_LM",
                        init_lora_weights="gaussian")
    try:
        policy = get_peft_model(policy, config)
    except ValueError as exc:
        raise ScriptError(f"--lora_target_modules={','.join(args.lora_target_modules)}: {short_error(exc)}") from exc
    policy.peft_config["default"].base_model_name_or_path = sft_path
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name and param.requires_grad:
                param.normal_(mean=0.0, std=0.02)
    policy.enable_input_require_grads()
    return policy


def freeze(model: Any) -> Any:
    """Dropout off, eval mode, no gradients."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def merged_state_dict(state: dict[str, Any], scaling: float) -> dict[str, Any]:
    """A PEFT-wrapped LoRA state dict as the plain model's: ``W + scaling * B @ A``, PEFT prefixes removed."""
    out: dict[str, Any] = {}
    for key, tensor in state.items():
        if ".lora_" in key:
            continue
        name = key.removeprefix("base_model.model.")
        if ".base_layer." in key:
            stem = key.split(".base_layer.")[0]
            a, b = state.get(f"{stem}.lora_A.default.weight"), state.get(f"{stem}.lora_B.default.weight")
            name = name.replace(".base_layer.", ".")
            if key.endswith(".base_layer.weight") and a is not None and b is not None:
                tensor = (tensor.float() + scaling * (b.float() @ a.float())).to(tensor.dtype)
        out[name] = tensor.detach().cpu().contiguous()
    return out


def save_policy(accelerator: Any, policy: Any, tokenizer: Any, path: Path, args: ScriptArguments,
                state: dict[str, Any]) -> None:
    """Write ``path`` (merged HF model + tokenizer [+ adapter/] + training_state.json). Called on every rank."""
    import copy

    full = accelerator.get_state_dict(policy)  # a collective under FSDP / DeepSpeed
    if accelerator.is_main_process:
        from huggingface_hub import save_torch_state_dict

        unwrapped = accelerator.unwrap_model(policy)
        lora = not args.full_ft
        base = unwrapped.get_base_model() if lora else unwrapped
        weights = merged_state_dict(full, args.lora_alpha / args.lora_rank) if lora else \
            {k: v.detach().cpu().contiguous() for k, v in full.items()}
        config = copy.deepcopy(base.config)
        config.use_cache = True
        with atomic_dir(path) as tmp:
            config.save_pretrained(str(tmp))
            if getattr(base, "generation_config", None) is not None:
                base.generation_config.save_pretrained(str(tmp))
            save_torch_state_dict(weights, str(tmp), max_shard_size="5GB")
            tokenizer.save_pretrained(str(tmp))
            if lora:
                unwrapped.save_pretrained(str(tmp / "adapter"), state_dict=full)
            (tmp / "training_state.json").write_text(json.dumps(state, indent=2))
        log(f"saved {path}")
    accelerator.wait_for_everyone()


# --------------------------------------------------------------------------------------------------------------
# the loop


def evaluate(accelerator: Any, policy: Any, reference: Any, loader: Any, beta: float) -> dict[str, float]:
    """DPO metrics over the whole validation split (every process evaluates its shard; results are gathered)."""
    import torch

    policy.eval()
    parts: dict[str, list[Any]] = {"loss": [], "chosen": [], "rejected": [], "margin": []}
    with torch.no_grad():
        for batch in loader:
            terms = dpo_terms(policy, reference, batch, beta)
            for key, gathered in parts.items():
                gathered.append(accelerator.gather_for_metrics(terms[key].detach()))
    policy.train()
    return summarize({k: torch.cat(v) for k, v in parts.items()})


def mean_across(accelerator: Any, values: dict[str, float]) -> dict[str, float]:
    """The mean of each value over the processes (a collective)."""
    import torch

    keys = sorted(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    tensor = accelerator.reduce(tensor, reduction="mean")
    return dict(zip(keys, tensor.tolist(), strict=True))


def train(args: ScriptArguments, sft_path: str, data_dir: Path, output_dir: Path) -> dict[str, Any]:
    """The DPO loop; returns the training state written with the models."""
    import torch
    from accelerate import Accelerator, DistributedType
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, Dataset
    from transformers import get_cosine_schedule_with_warmup

    from mlrecipe_scripts.core.progress import report_progress

    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    set_seed(args.seed)
    main = accelerator.is_main_process
    precision = select_precision()
    wandb = None
    if args.use_wandb and main:
        import wandb as _wandb

        wandb = _wandb
        wandb.init(project="dpo-training", config={k: v for k, v in asdict(args).items() if k != "rmdc"})

    tok_path, tok_flag = sft_tokenizer_source(sft_path, args.hf_model_id)
    tokenizer = load_tokenizer(tok_path, args.trust_remote_code, padding_side="right", flag=tok_flag)
    train_ds = DPODataset(data_dir / "training.jsonl", tokenizer, args.max_seq_length)
    eval_ds = DPODataset(data_dir / "validation.jsonl", tokenizer, args.max_seq_length)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training pairs")
    if main:
        log(f"data {data_dir}: {len(train_ds)} training pairs, {len(eval_ds)} validation pairs")
        if args.debug:
            first = train_ds[0]
            log(f"debug: first pair: prompt_len {first['prompt_len']}, chosen {len(first['input_ids_chosen'])} "
                f"tokens, rejected {len(first['input_ids_rejected'])} tokens; keys {sorted(train_ds.rows[0])}")
    collate = PairCollator(tokenizer)
    train_dl = DataLoader(cast("Dataset[dict[str, Any]]", train_ds), batch_size=args.per_device_batch_size,
                          shuffle=True, num_workers=args.num_workers, collate_fn=collate)
    eval_dl = DataLoader(cast("Dataset[dict[str, Any]]", eval_ds), batch_size=args.per_device_batch_size,
                         shuffle=False, num_workers=args.num_workers, collate_fn=collate) if len(eval_ds) else None

    load = {"dtype": precision.dtype, "attn_implementation": precision.attn_implementation,
            "trust_remote_code": args.trust_remote_code, "use_cache": False}
    if main:
        log(f"policy and reference from {sft_path}: {precision.describe()}; "
            f"{'full fine-tuning' if args.full_ft else f'LoRA r={args.lora_rank}'}; beta {args.beta}")
    policy = load_sft_model(sft_path, "--sft_model_path", args.hf_model_id, **load)
    reference = freeze(load_sft_model(sft_path, "--sft_model_path", args.hf_model_id, **load))
    policy.config.use_cache = False
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not args.full_ft:
        policy = add_lora(policy, args, sft_path)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    if main:
        total = sum(p.numel() for p in policy.parameters())
        count = sum(p.numel() for p in trainable)
        log(f"trainable {count:,} / total {total:,} ({100 * count / max(total, 1):.2f}%)")

    optimizer = torch.optim.AdamW(trainable, lr=args.learning_rate, weight_decay=args.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, args.warmup_steps, args.max_steps)
    if eval_dl is not None:
        policy, optimizer, train_dl, eval_dl = accelerator.prepare(policy, optimizer, train_dl, eval_dl)
    else:
        policy, optimizer, train_dl = accelerator.prepare(policy, optimizer, train_dl)
    if accelerator.distributed_type == DistributedType.FSDP and not getattr(accelerator, "is_fsdp2", False):
        reference = accelerator.prepare_model(reference)  # sharded like the policy (frozen, no optimizer)
    else:
        reference = reference.to(accelerator.device)
    if eval_dl is None and main:
        log("note: the validation split is empty: no evaluation, no early stopping, no best_model/")

    state: dict[str, Any] = {"step": 0, "max_steps": args.max_steps, "best_eval_loss": None, "stopped_early": False,
                             "log_history": []}
    best, patience, step, epoch = math.inf, 0, 0, 0
    window: list[dict[str, float]] = []
    batches = iter(train_dl)
    policy.train()
    if main:
        n = accelerator.num_processes
        log(f"training: {args.max_steps} steps, {n} process{'es' if n != 1 else ''} x {args.per_device_batch_size} "
            f"pairs x {args.gradient_accumulation_steps} accumulation")
    while step < args.max_steps:
        try:
            batch = next(batches)
        except StopIteration:
            epoch += 1
            if hasattr(train_dl, "set_epoch"):
                train_dl.set_epoch(epoch)
            batches = iter(train_dl)
            batch = next(batches)
        with accelerator.accumulate(policy):
            terms = dpo_terms(policy, reference, batch, args.beta)
            loss = terms["loss"].mean()
            accelerator.backward(loss)
            grad_norm = None
            if accelerator.sync_gradients:
                grad_norm = accelerator.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
        window.append(summarize({k: v.detach() for k, v in terms.items()}))
        if not accelerator.sync_gradients:
            continue
        scheduler.step()
        step += 1
        if step == 1 and args.debug and main:
            log(f"debug: prompt_lens {batch['prompt_lens'].tolist()}, chosen {tuple(batch['input_ids_chosen'].shape)}, "
                f"rejected {tuple(batch['input_ids_rejected'].shape)}, loss {float(loss.detach()):.4f}")
        if step % args.logging_steps == 0:
            record = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
            if grad_norm is not None:
                record["grad_norm"] = float(grad_norm)
            record = mean_across(accelerator, record)
            record["learning_rate"] = scheduler.get_last_lr()[0]
            state["log_history"].append({"step": step, **record})
            if main:
                log(f"step {step}/{args.max_steps} | loss {record['loss']:.4f} | accuracy {record['accuracy']:.3f} | "
                    f"reward margin {record['reward_margin']:.4f} | chosen {record['reward_chosen']:.4f} | "
                    f"rejected {record['reward_rejected']:.4f} | lr {record['learning_rate']:.3g}")
                report_progress(step, args.max_steps, **record)
                if wandb is not None:
                    wandb.log({f"train/{k}": v for k, v in record.items()} | {"global_step": step})
            window = []
        stop = False
        if eval_dl is not None and step % args.eval_steps == 0:
            metrics = evaluate(accelerator, policy, reference, eval_dl, args.beta)
            state["log_history"].append({"step": step, **{f"eval_{k}": v for k, v in metrics.items()}})
            if main:
                log(f"eval at step {step} | loss {metrics['loss']:.4f} | accuracy {metrics['accuracy']:.3f} | "
                    f"reward margin {metrics['reward_margin']:.4f}")
                report_progress(step, args.max_steps, **{f"eval_{k}": v for k, v in metrics.items()})
                if wandb is not None:
                    wandb.log({f"eval/{k}": v for k, v in metrics.items()} | {"global_step": step})
            if metrics["loss"] < best - args.early_stopping_threshold:
                best, patience = metrics["loss"], 0
                state.update(step=step, best_eval_loss=best)
                save_policy(accelerator, policy, tokenizer, output_dir / "best_model", args, state)
            else:
                patience += 1
                if main:
                    log(f"no improvement on the best eval loss {best:.4f}: patience {patience}/"
                        f"{args.early_stopping_patience}")
                stop = patience >= args.early_stopping_patience
        if step % args.save_steps == 0:
            state["step"] = step
            save_policy(accelerator, policy, tokenizer, output_dir / f"checkpoint-{step}", args, state)
        if stop:
            state["stopped_early"] = True
            if main:
                log(f"early stopping after {step} steps")
            break
    state["step"] = step
    save_policy(accelerator, policy, tokenizer, output_dir / "final", args, state)
    if wandb is not None:
        wandb.finish()
    accelerator.end_training()
    return state


def main(argv: list[str] | None = None) -> int:
    """Validate the inputs, prepare the data, train and save; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    check_numbers(args)
    sft_path = resolve_sft_model_path(args.sft_model_path, args.hf_model_id)
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_rm_data_dir(args.rmdc)
    output_dir = Path(args.output_dir).expanduser() if args.output_dir else results_dir(f"dpo_{args.hf_model_id}")
    if args.use_wandb:
        import importlib.util

        if not importlib.util.find_spec("wandb"):
            raise ScriptError("--use_wandb: the wandb package is not installed")
    poll = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5"))
    prepare_rm_datasets(args.rmdc, data_dir, poll_seconds=poll)
    state = train(args, sft_path, data_dir, output_dir)
    if is_main_process():
        log(f"done: {state['step']} steps; best eval loss {state['best_eval_loss']}; "
            f"policy in {output_dir / 'final'}")
    return 0


if __name__ == "__main__":
    run_main(main)
