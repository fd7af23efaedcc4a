"""Smoke test of the adapter registry: no arguments, prints what it checks, exits 1 if a check fails.

Checks: the registry listing; detection of the supported hub ids and of a local model directory by its
``config.json`` ``model_type``; LoRA targets with and without the vision tower (and that the target expression
selects language projections only unless asked); special tokens; vision-tower module names; unsupported models
raise ``ValueError``. Needs neither torch nor a model (runs in a second).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import (
    ADAPTER_REGISTRY,
    get_adapter_for_model,
    list_supported_models,
    print_supported_models,
)

FAILURES: list[str] = []


def check(ok: bool, what: str) -> None:
    """Print one ``ok`` / ``FAIL`` line and remember failures."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)


def section(title: str) -> None:
    print(f"\n== {title}")


def test_adapter_detection() -> None:
    section("adapter detection by model id")
    for name, models in list_supported_models().items():
        for model_id in models:
            adapter = get_adapter_for_model(model_id, model_type="")
            check(adapter.model_family == name, f"{model_id} -> {adapter.model_family}")
    adapter = get_adapter_for_model("/models/qwen/qwen3-vl-8b-instruct", model_type="")
    check(adapter.model_family == "qwen-vl", "a path containing the id (any case) -> qwen-vl")


def test_local_directory_detection() -> None:
    section("adapter detection by config.json model_type")
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in ("qwen3_vl", "qwen2_5_vl", "qwen2_vl"):
            model_dir = Path(tmp) / f"tiny-{model_type}"
            model_dir.mkdir()
            (model_dir / "config.json").write_text(json.dumps({"model_type": model_type}))
            try:
                family = get_adapter_for_model(str(model_dir)).model_family
            except ValueError as exc:
                family = f"ValueError: {exc}"
            check(family == "qwen-vl", f"{model_dir.name} (model_type {model_type}) -> {family}")


def test_lora_targets() -> None:
    section("LoRA targets")
    for name, cls in ADAPTER_REGISTRY.items():
        adapter = cls()
        language = adapter.get_lora_target_modules(include_vision=False)
        both = adapter.get_lora_target_modules(include_vision=True)
        print(f"  {name}: language {language}")
        print(f"  {name}: with vision {both}")
        check(set(language) <= set(both) and len(both) >= len(language), f"{name}: vision targets extend language")
        plain, vision = adapter.lora_target_regex(False), adapter.lora_target_regex(True)
        lm = "model.language_model.layers.0.self_attn.q_proj"
        vit = "model.visual.blocks.0.attn.qkv"
        check(bool(re.fullmatch(plain, lm)) and not re.fullmatch(plain, vit), f"{name}: language-only expression")
        check(bool(re.fullmatch(vision, lm)) and bool(re.fullmatch(vision, vit)), f"{name}: expression with vision")


def test_special_tokens_and_vision_modules() -> None:
    section("special tokens and vision modules")
    for name, cls in ADAPTER_REGISTRY.items():
        adapter = cls()
        print(f"  {name}: special tokens {adapter.get_special_tokens()}")
        print(f"  {name}: vision modules {adapter.get_vision_encoder_modules()}")
        check(bool(adapter.get_vision_encoder_modules()), f"{name}: names its vision modules")


def test_unsupported_models() -> None:
    section("unsupported models")
    for model_id, model_type in (("llava-hf/llava-1.5-7b-hf", ""), ("some/unsupported-model", ""),
                                 ("/models/tiny-llama", "llama")):
        try:
            adapter = get_adapter_for_model(model_id, model_type=model_type)
            check(False, f"{model_id}: expected ValueError, got {adapter.model_family}")
        except ValueError as exc:
            check(True, f"{model_id}: ValueError ({str(exc)[:90]}...)")


def main() -> int:
    print_supported_models()
    test_adapter_detection()
    test_local_directory_detection()
    test_lora_targets()
    test_special_tokens_and_vision_modules()
    test_unsupported_models()
    print(f"\n{'ALL CHECKS PASSED' if not FAILURES else f'{len(FAILURES)} CHECK(S) FAILED'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
