"""Pairwise reward model: a sequence-classification head (1 label) on the SFT model, trained with the HF Trainer.

Run it under ``accelerate launch`` (any accelerate config) or plain ``python``. Flags are the fields of
:class:`ScriptArguments` (family D0): only the flags given override the defaults; a boolean flag flips its
default; ``--rmdc_*`` rebuild the preference dataset config (then ``--rmdc_dataset_name`` is required).

The starting model is ``--sft_model_path``, by default the newest converted SFT checkpoint
(``$HOME/results/<hf_model_id>/checkpoint-N.hf_model`` or ``.hf_peft``, as written by
``shared/convert_checkpoint_to_hf.py``). An adapter (``.hf_peft``) is merged into its base model
(``base_model.txt``, else ``--hf_model_id``). The loss is ``-logsigmoid(r_chosen - r_rejected)``; chosen and
rejected go through the model in one forward pass. All parameters train, as in the reference: ``--full_ft`` and
the ``--lora_*`` flags are accepted but not used. Evaluation also reports ``eval_accuracy`` (the share of
validation pairs whose chosen answer scores higher).

Writes ``<output_dir>/checkpoint-<step>/`` at each evaluation that improves ``eval_loss`` (default output_dir
``$HOME/results/reward_<hf_model_id>``), ``<output_dir>/final/`` (a ``*ForSequenceClassification`` model with
``num_labels=1`` plus tokenizer: usable as PPO's ``--reward_model_path``) and ``<output_dir>/logs/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
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
    save_final_model,
    select_precision,
    sft_tokenizer_source,
    step_training_arguments,
)
from mlrecipe_scripts.accelerate.text.rm_dataset import (
    RMDC_NOT_ON_CLI,
    PairCollator,
    RewardModelDataset,
    RMDatasetConfig,
    default_rm_data_dir,
    prepare_rm_datasets,
    rm_default_config,
)


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``rmdc`` becomes ``--rmdc_<field>``)."""

    hf_model_id: str = "Qwen/Qwen3-8B"
    trust_remote_code: bool = True
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    rmdc: RMDatasetConfig = field(default_factory=rm_default_config)
    max_steps: int = 10000
    per_device_train_batch_size: int = 2
    per_device_eval_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    max_seq_length: int = 2048
    data_dir: str | None = None
    output_dir: str | None = None
    sft_model_path: str | None = None
    logging_steps: int = 10
    eval_steps: int = 100
    max_eval_samples: int = 640
    use_wandb: bool = False
    seed: int = 42
    num_workers: int = 8


NESTED = {"rmdc": (RMDatasetConfig, RMDC_NOT_ON_CLI)}


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def pair_rewards(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """(chosen rewards, rejected rewards), each of shape [batch], from one forward pass over both sides."""
    import torch

    n = inputs["input_ids_chosen"].shape[0]
    ids = torch.cat([inputs["input_ids_chosen"], inputs["input_ids_rejected"]])
    mask = torch.cat([inputs["attention_mask_chosen"], inputs["attention_mask_rejected"]])
    scores = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()
    return scores[:n], scores[n:]


def make_trainer_class() -> type:
    """The Trainer subclass with the pairwise loss (transformers imported here, not at module import)."""
    import torch
    import torch.nn.functional as F

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import script_trainer_class

    class RewardTrainer(script_trainer_class()):  # type: ignore[misc]  # a Trainer subclass made at run time
        """Trainer with ``-logsigmoid(r_chosen - r_rejected)`` as the loss; eval returns both rewards."""

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = False  # the loss is a mean per pair: let the Trainer scale it for GA

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            chosen, rejected = pair_rewards(model, inputs)
            loss = -F.logsigmoid(chosen - rejected).mean()
            if return_outputs:
                return loss, {"rewards_chosen": chosen, "rewards_rejected": rejected}
            return loss

        def prediction_step(self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool,
                            ignore_keys: Any = None) -> tuple[Any, Any, Any]:
            inputs = self._prepare_inputs(inputs)
            with torch.no_grad():
                chosen, rejected = pair_rewards(model, inputs)
                loss = -F.logsigmoid(chosen - rejected).mean().detach()
            if prediction_loss_only:
                return loss, None, None
            return loss, torch.stack([chosen, rejected], dim=1), torch.zeros_like(chosen)

    return RewardTrainer


def compute_metrics(prediction: Any) -> dict[str, float]:
    """``accuracy``: the share of pairs whose chosen reward is higher; ``margin``: mean reward difference."""
    import numpy as np

    scores = np.asarray(prediction.predictions)
    if scores.ndim != 2 or scores.shape[0] == 0:
        return {}
    diff = scores[:, 0] - scores[:, 1]
    return {"accuracy": float((diff > 0).mean()), "margin": float(diff.mean())}


def main(argv: list[str] | None = None) -> int:
    """Train the reward model and save it; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    sft_path = resolve_sft_model_path(args.sft_model_path, args.hf_model_id)
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_rm_data_dir(args.rmdc)
    output_dir = Path(args.output_dir).expanduser() if args.output_dir else \
        results_dir(f"reward_{args.hf_model_id}")
    if is_main_process():
        log("note: the reward model trains all parameters; --full_ft and --lora_* are accepted for compatibility "
            "and not used (as in the reference)")

    poll = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5"))
    prepare_rm_datasets(args.rmdc, data_dir, poll_seconds=poll)

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import step_callbacks

    precision = select_precision()
    log(f"reward model from {sft_path}: {precision.describe()}; all parameters train")
    tok_path, tok_flag = sft_tokenizer_source(sft_path, args.hf_model_id)
    tokenizer = load_tokenizer(tok_path, args.trust_remote_code, padding_side="right", flag=tok_flag)
    train_ds = RewardModelDataset(data_dir / "training.jsonl", tokenizer, args.max_seq_length)
    eval_ds = RewardModelDataset(data_dir / "validation.jsonl", tokenizer, args.max_seq_length,
                                 args.max_eval_samples)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training pairs")
    log(f"data {data_dir}: {len(train_ds)} training pairs, {len(eval_ds)} validation pairs used for evaluation")

    model = load_sft_model(sft_path, "--sft_model_path", args.hf_model_id, "AutoModelForSequenceClassification",
                           dtype=precision.dtype, attn_implementation=precision.attn_implementation,
                           trust_remote_code=args.trust_remote_code, num_labels=1, use_cache=False)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.use_cache = False

    evaluate = len(eval_ds) > 0
    if not evaluate:
        log("note: the validation split is empty: no evaluation, no early stopping; saving every eval_steps")
    targs = step_training_arguments(args, output_dir, precision, evaluate, gradient_checkpointing=True,
                                    gradient_checkpointing_kwargs={"use_reentrant": False})
    callbacks = step_callbacks(args, evaluate)
    trainer = make_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds if evaluate else None,
        data_collator=PairCollator(tokenizer), processing_class=tokenizer, callbacks=callbacks,
        compute_metrics=compute_metrics if evaluate else None)
    result = trainer.train()
    final = output_dir / "final"
    save_final_model(trainer, tokenizer, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; reward model in {final}")
    return 0


if __name__ == "__main__":
    run_main(main)
