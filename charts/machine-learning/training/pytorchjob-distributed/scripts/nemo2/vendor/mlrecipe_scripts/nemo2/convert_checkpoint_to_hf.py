"""Export the newest NeMo 2 fine-tuning checkpoint to Hugging Face format (merged model, or a PEFT adapter).

The checkpoint: ``--nemo_logs_dir`` (default: the newest ``nemo_logs`` directory under ``$HOME/outputs``), its newest
timestamp run, the newest ``checkpoints/nemo_logs--*`` directory (not ``.hf_model`` / ``.hf_peft`` / ``.merged``);
``--nemo_logs_dir`` may also name a run or a checkpoint directory. It must hold ``context/`` and ``weights/``.

* LoRA checkpoint (``weights/adapter_metadata.json``, which names the imported base checkpoint): by default
  ``llm.peft.merge_lora`` writes ``<checkpoint>.merged`` (kept, and reused by a later run unless ``--overwrite``),
  then ``llm.export_ckpt(target=--target)`` writes ``<checkpoint>.hf_model``; with ``--no_merge``
  ``llm.peft.export_lora`` writes the adapter to ``<checkpoint>.hf_peft``.
* Full fine-tuning checkpoint: ``llm.export_ckpt`` straight to ``<checkpoint>.hf_model``.

Output names append the suffix to the whole checkpoint name (``...consumed_samples=51200.0.hf_model``; the reference
replaced the last dotted part). Outputs are written to a temporary sibling and renamed; an existing output is an
error unless ``--overwrite``. ``--use_modelopt`` is accepted: NeMo's ``export_ckpt`` itself takes the ModelOpt route
for checkpoints that ModelOpt produced. Flags: family C (typed; booleans are flags).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from mlrecipe_scripts.nemo2.nemo2_common import (
    ScriptError,
    adapter_base,
    add_flags,
    atomic_dir,
    check_checkpoint,
    find_checkpoint,
    log,
    offline_defaults,
    require_nemo,
    run_main,
    sibling,
)


@dataclass
class ExportConfig:
    """Flags (family C), in the reference's order."""

    nemo_logs_dir: str | None = None
    target: str = "hf"
    overwrite: bool = False
    no_merge: bool = False
    use_modelopt: bool = False


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family C)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flags(parser, ExportConfig)
    return parser


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    config = ExportConfig(**vars(parser.parse_args(argv)))
    if not config.target.strip():
        parser.error("--target: empty")
    return config


@dataclass
class Plan:
    """What this run will read and write."""

    checkpoint: Path
    lora: bool
    base: Path | None  # the imported base checkpoint of a LoRA checkpoint
    output: Path
    merged: Path | None  # the intermediate merged NeMo checkpoint (LoRA, merge mode)


def make_plan(config: ExportConfig, home: Path | None = None) -> Plan:
    """Find and check the checkpoint and the outputs (no NeMo needed); ScriptError naming the path otherwise."""
    ckpt = find_checkpoint(config.nemo_logs_dir, home)
    check_checkpoint(ckpt)
    base = adapter_base(ckpt)
    lora = base is not None
    if base is not None and "://" not in str(base) and not base.is_dir():
        raise ScriptError(f"{base}: no such directory: the base checkpoint that {ckpt.name} adapts (named in its "
                          "weights/adapter_metadata.json; the imported_hf_ckpt of the fine-tuning run)")
    if config.no_merge and not lora:
        raise ScriptError(f"--no_merge: {ckpt} is a full fine-tuning checkpoint (no LoRA adapter to export)")
    output = sibling(ckpt, ".hf_peft" if config.no_merge else ".hf_model")
    if output.exists() and not config.overwrite:
        raise ScriptError(f"{output}: already exists (pass --overwrite to replace it)")
    merged = sibling(ckpt, ".merged") if lora and not config.no_merge else None
    return Plan(ckpt, lora, base, output, merged)


def merge(plan: Plan, overwrite: bool) -> Path:
    """``<checkpoint>.merged`` (LoRA merged into the base), reused when complete and not ``--overwrite``."""
    from nemo.collections.llm import peft

    merged = plan.merged
    assert merged is not None
    if (merged / "context").is_dir() and (merged / "weights").is_dir() and not overwrite:
        log(f"reusing the merged checkpoint {merged} (pass --overwrite to merge again)")
        return merged
    log(f"merging the LoRA adapter of {plan.checkpoint.name} into its base {plan.base} ...")
    with atomic_dir(merged) as tmp:
        peft.merge_lora(lora_checkpoint_path=str(plan.checkpoint), output_path=str(tmp))
    log(f"merged checkpoint: {merged}")
    return merged


def main(argv: list[str] | None = None) -> int:
    """Merge / export; returns the exit status."""
    config = parse_args(argv)
    offline_defaults()
    plan = make_plan(config)
    kind = "LoRA" if plan.lora else "full fine-tuning"
    log(f"checkpoint {plan.checkpoint} ({kind}) -> {plan.output}")
    require_nemo("convert_checkpoint_to_hf.py", "nemo.collections.llm")
    from nemo.collections.llm import api, peft

    if config.use_modelopt:
        log("note: --use_modelopt: NeMo's export_ckpt uses the ModelOpt route for checkpoints ModelOpt produced")
    with atomic_dir(plan.output, replace=config.overwrite) as tmp:
        if config.no_merge:
            if config.target != "hf":
                log(f"note: --target={config.target} is not used with --no_merge (the adapter is exported as hf-peft)")
            log("exporting the LoRA adapter to Hugging Face PEFT format ...")
            peft.export_lora(lora_checkpoint_path=str(plan.checkpoint), output_path=str(tmp))
        else:
            source = merge(plan, config.overwrite) if plan.lora else plan.checkpoint
            log(f"exporting {source.name} to {config.target} format ...")
            api.export_ckpt(path=source, target=config.target, output_path=tmp, overwrite=False)
    files = sorted(p.name for p in plan.output.iterdir()) if plan.output.is_dir() else []
    log(f"exported {plan.output}: {', '.join(files[:12])}{' ...' if len(files) > 12 else ''}")
    return 0


if __name__ == "__main__":
    run_main(main)
