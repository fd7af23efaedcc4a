"""The Trainer class the accelerate and ray_train scripts build (``shared/callbacks.script_trainer_class``).

It is ``transformers.Trainer`` with one change: the FLOs estimate (``total_flos``) counts the model's parameters
at the first step only, where the Trainer walks every parameter at every optimizer step. The figures must stay
the Trainer's own.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks.helpers import need_ml_stack


@pytest.fixture(scope="module")
def callbacks(scripts_dir: Path) -> ModuleType:
    need_ml_stack()
    return importlib.import_module("mlrecipe_scripts.hf_trainer.trainer_callbacks")


def test_flos_match_the_trainer_and_parameters_are_counted_once(callbacks: ModuleType, scripts_dir: Path,
                                                                  tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    script_trainer = callbacks.script_trainer_class()(model=model, args=args)
    plain = Trainer(model=model, args=args)
    assert isinstance(script_trainer, Trainer)

    counted = []
    original = model.num_parameters

    def counting(*a: object, **kw: object) -> int:
        counted.append(kw)
        return original(*a, **kw)

    model.num_parameters = counting
    batches = [{"input_ids": torch.ones(4, n, dtype=torch.long)} for n in (16, 9, 31)]
    ours = [script_trainer.floating_point_ops(b) for b in batches]
    assert counted == [{"exclude_embeddings": True}]
    theirs = [plain.floating_point_ops(b) for b in batches]
    assert ours == theirs
    assert ours[0] == 6 * 4 * 16 * original(exclude_embeddings=True) > 0
    assert script_trainer.floating_point_ops({"pixel_values": torch.ones(1, 3)}) == 0  # no input_ids: none


def test_the_reward_trainer_builds_on_it(callbacks: ModuleType, scripts_dir: Path) -> None:
    reward = importlib.import_module("mlrecipe_scripts.accelerate.text.reward_model_accelerate")
    assert issubclass(reward.make_trainer_class(), callbacks.CountParametersOnce)
    assert callbacks.script_trainer_class() is callbacks.script_trainer_class()
