"""The two sides of ``benchmarks/bench_accelerate_sft.py``, each timed by the same Trainer callback.

``python sft_worker.py script PATH [ARGS...]`` runs the framework script ``PATH`` as ``__main__`` with ``ARGS``
(``sys.argv`` as if it were run directly; run it from the scripts directory, like the recipes), after patching
``transformers.Trainer.__init__`` so that every Trainer gets a :class:`StepTimer`. Nothing else is changed.

``python sft_worker.py baseline --model DIR --train JSONL --output DIR [--knob ...]`` is a minimal hand-written
LoRA SFT with ``transformers.Trainer``: rows pre-tokenized once (``input + output``, prompt tokens masked with
-100, truncated to ``--max_seq_length``), ``DataCollatorForSeq2Seq`` with dynamic padding, default
``TrainingArguments`` apart from the hyper-parameters, no evaluation, no saving, ``report_to="none"``. Each
``--like KNOB`` turns on one thing the framework script does differently, to measure its cost on its own:

* ``checkpointing``: activation (gradient) checkpointing, non-reentrant (the Trainer then also calls
  ``enable_input_require_grads``);
* ``input_grads``: ``model.enable_input_require_grads()`` alone (the script calls it whatever the checkpointing);
* ``pad8``: the collator pads to a multiple of 8;
* ``tokenize``: tokenization per item in ``__getitem__`` (prompt and prompt + answer, every epoch);
* ``tensorboard``: ``report_to=["tensorboard"]``;
* ``no_cache``: the model is loaded with ``use_cache=False``;
* ``keep_columns``: ``remove_unused_columns=False`` (the default wraps the collator to drop unknown keys);
* ``flops_once``: the Trainer's FLOs estimate counts the model's parameters once, not at every step (written here
  by hand, as the script's ``shared/callbacks.CountParametersOnce`` does it).

``python sft_worker.py check --scripts DIR --model DIR --train JSONL --max_seq_length N`` prints a JSON line
saying whether the baseline's token ids / labels equal the framework's ``SFTDataset`` items, row for row.

Both run under ``python`` or ``accelerate launch``. The timer writes one JSON object to ``$SFT_BENCH_STAMP`` (global
rank 0): the ``time.perf_counter()`` and ``time.process_time()`` of each optimizer step's end, the samples per
optimizer step (per-device batch x accumulation x processes), the evaluations / saves seen, and the Trainer's own
``train_*`` speed metrics.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

STAMP_VAR = "SFT_BENCH_STAMP"
KNOBS = ("checkpointing", "input_grads", "pad8", "tokenize", "tensorboard", "no_cache", "keep_columns", "flops_once")


class StepTimer(TrainerCallback):
    """Records the end of every optimizer step; writes the record at the end of training (rank 0)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.step_ends: list[float] = []
        self.step_cpu: list[float] = []
        self.events: list[list[Any]] = []
        self.trainer: dict[str, float] = {}
        self.record: dict[str, Any] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        self.record = {
            "train_begin": time.perf_counter(),
            "train_begin_cpu": time.process_time(),
            "samples_per_step": args.per_device_train_batch_size * args.gradient_accumulation_steps * world,
            "world_size": world,
            "max_steps": state.max_steps,
            "checkpointing": bool(getattr(args, "activation_checkpointing", False)
                                  or getattr(args, "gradient_checkpointing", False)),
            "logging_steps": args.logging_steps,
            "num_workers": args.dataloader_num_workers,
        }
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.step_ends.append(time.perf_counter())
        self.step_cpu.append(time.process_time())
        return control

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.events.append(["evaluate", state.global_step, time.perf_counter()])
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.events.append(["save", state.global_step, time.perf_counter()])
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
        for key, value in (logs or {}).items():
            if key.startswith("train_") and isinstance(value, int | float):
                self.trainer[key] = float(value)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.path and state.is_world_process_zero:
            record = dict(self.record, step_ends=self.step_ends, step_cpu=self.step_cpu, events=self.events,
                          trainer=self.trainer,
                          train_end=time.perf_counter(), global_step=state.global_step)
            Path(self.path).write_text(json.dumps(record), encoding="utf-8")
        return control


def run_script(path: str, argv: list[str]) -> None:
    """Run the framework script as ``__main__`` with a :class:`StepTimer` added to its Trainer."""
    import runpy

    import transformers

    original = transformers.Trainer.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.add_callback(StepTimer(os.environ.get(STAMP_VAR)))

    transformers.Trainer.__init__ = init  # type: ignore[method-assign]
    sys.argv = [path, *argv]
    runpy.run_path(path, run_name="__main__")


def load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def read_rows(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def encode_row(tok: Any, row: dict[str, Any], max_len: int) -> dict[str, list[int]]:
    """``input + output`` tokenized (truncated), the prompt's tokens masked with -100 in the labels."""
    prompt, answer = str(row.get("input") or ""), str(row.get("output") or "")
    ids = tok(prompt + answer, truncation=True, max_length=max_len)["input_ids"]
    n_prompt = min(len(tok(prompt, truncation=True, max_length=max_len)["input_ids"]) if prompt else 0, len(ids))
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": [-100] * n_prompt + ids[n_prompt:]}


def parse_baseline(argv: list[str]) -> Any:
    import argparse

    p = argparse.ArgumentParser(prog="sft_worker.py baseline")
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True, help="training.jsonl ({input, output} rows)")
    p.add_argument("--output", required=True)
    p.add_argument("--max_steps", type=int, required=True)
    p.add_argument("--per_device_train_batch_size", type=int, default=2)
    p.add_argument("--gradient_accumulation_steps", type=int, default=4)
    p.add_argument("--max_seq_length", type=int, default=2048)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--weight_decay", type=float, default=0.0, help="AdamW's (the bench passes the script's)")
    p.add_argument("--logging_steps", type=int, default=10)
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--lora_rank", type=int, default=32)
    p.add_argument("--lora_alpha", type=int, default=32)
    p.add_argument("--lora_dropout", type=float, default=0.1)
    p.add_argument("--lora_target_modules", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    p.add_argument("--like", action="append", default=[], choices=KNOBS,
                   help="turn on one of the framework script's settings (repeatable)")
    return p.parse_args(argv)


def run_baseline(argv: list[str]) -> None:
    """The minimal hand-written LoRA SFT with ``transformers.Trainer``."""
    a = parse_baseline(argv)
    like = set(a.like)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    tok = load_tokenizer(a.model)

    def encode(row: dict[str, str]) -> dict[str, list[int]]:
        return encode_row(tok, row, a.max_seq_length)

    rows = read_rows(a.train)

    class PerItem:  # like the script: tokenize in __getitem__
        def __len__(self) -> int:
            return len(rows)

        def __getitem__(self, i: int) -> dict[str, list[int]]:
            return encode(rows[i])

    train: Any = PerItem() if "tokenize" in like else [encode(r) for r in rows]

    model = AutoModelForCausalLM.from_pretrained(a.model, **({"use_cache": False} if "no_cache" in like else {}))
    model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
                                             target_modules=a.lora_target_modules.split(","), bias="none",
                                             task_type="CAUSAL_LM"))
    if "input_grads" in like:
        model.enable_input_require_grads()
    ckpt: dict[str, Any] = {}
    if "checkpointing" in like:
        ckpt = {"activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": False}}
    args = TrainingArguments(
        output_dir=a.output, max_steps=a.max_steps, per_device_train_batch_size=a.per_device_train_batch_size,
        gradient_accumulation_steps=a.gradient_accumulation_steps, learning_rate=a.learning_rate,
        warmup_steps=a.warmup_steps, max_grad_norm=a.max_grad_norm, logging_steps=a.logging_steps,
        eval_strategy="no", save_strategy="no", use_cpu=True, seed=a.seed, dataloader_num_workers=a.num_workers,
        report_to=["tensorboard"] if "tensorboard" in like else "none",
        weight_decay=a.weight_decay,
        **({"remove_unused_columns": False} if "keep_columns" in like else {}), **ckpt)
    collator = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100,
                                      pad_to_multiple_of=8 if "pad8" in like else None)
    trainer_class: Any = Trainer
    if "flops_once" in like:
        class CountOnce(Trainer):
            parameters: int | None = None

            def floating_point_ops(self, inputs: dict[str, Any]) -> int:
                if self.parameters is None:
                    self.parameters = int(self.model.num_parameters(exclude_embeddings=True))
                return 6 * inputs["input_ids"].numel() * self.parameters

        trainer_class = CountOnce
    trainer = trainer_class(model=model, args=args, train_dataset=train, data_collator=collator,
                            callbacks=[StepTimer(os.environ.get(STAMP_VAR))])
    trainer.train()


def check_data(argv: list[str]) -> None:
    """Compare the baseline's encoding with the framework's ``SFTDataset`` for every training row."""
    import argparse

    p = argparse.ArgumentParser(prog="sft_worker.py check")
    for flag in ("--scripts", "--model", "--train"):
        p.add_argument(flag, required=True)
    p.add_argument("--max_seq_length", type=int, required=True)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(a.scripts) / "text"))
    sys.path.insert(0, str(Path(a.scripts)))
    from dataset_module import SFTDataset

    tok = load_tokenizer(a.model)
    theirs = SFTDataset(a.train, tok, a.max_seq_length)
    mine = [encode_row(tok, row, a.max_seq_length) for row in read_rows(a.train)]
    differ = [i for i, row in enumerate(mine) if row != theirs[i]]
    print(json.dumps({"rows": len(mine), "framework_rows": len(theirs), "differ": differ[:10],
                      "tokens": sum(len(r["input_ids"]) for r in mine)}))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "script" and len(sys.argv) > 2:
        run_script(sys.argv[2], sys.argv[3:])
    elif mode == "baseline":
        run_baseline(sys.argv[2:])
    elif mode == "check":
        check_data(sys.argv[2:])
    else:
        sys.exit("usage: sft_worker.py script PATH [ARGS...] | baseline --model DIR ... | check --scripts DIR ...")


if __name__ == "__main__":
    main()
