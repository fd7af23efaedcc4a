"""Tiny, offline preference data (chosen / rejected pairs) for the reward-model, DPO and PPO scripts.

The prompts use the SFT prompt template and the vocabulary of :mod:`tests.frameworks.tiny` (so the tiny BPE
tokenizer covers them). The chosen answer follows the task's rule; the rejected one breaks it in a way a tiny
model can learn: digits left as digits, the animal not in capitals, the colour said once.
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.frameworks.tiny import ANIMALS, COLORS, NUMBERS, write_jsonl

PROMPT = "### Instruction:\n{instruction}\n ### Input:\n{input}\n"


def preference_rows(n: int = 120, seed: int = 0, prompt_column: str = "prompt") -> list[dict[str, str]]:
    """Rows ``{prompt_column, "chosen", "rejected"}`` cycling through three tasks."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            digits = [rng.randrange(10) for _ in range(3)]
            instruction, given = "Spell the digits as words.", " ".join(map(str, digits))
            chosen, rejected = " ".join(NUMBERS[d] for d in digits), given
        elif kind == 1:
            color = rng.choice(COLORS)
            instruction, given = "Repeat the color twice.", color
            chosen, rejected = f"{color} {color}", f"{color}"
        else:
            animal = rng.choice(ANIMALS)
            instruction, given = "Name the animal in capitals.", f"the {animal}"
            chosen, rejected = animal.upper(), animal
        rows.append({prompt_column: PROMPT.format(instruction=instruction, input=given),
                     "chosen": f"### Response:\n{chosen}", "rejected": f"### Response:\n{rejected}"})
    return rows


def make_preference_dataset(out: Path, n: int = 120) -> Path:
    """A local dataset directory (one ``pairs.jsonl``) usable as ``--rmdc_dataset_name``."""
    write_jsonl(out / "pairs.jsonl", preference_rows(n))
    return out


def make_prepared_prompt_dir(out: Path, n_train: int = 32) -> Path:
    """A pre-populated SFT-style ``data_dir`` for PPO (only ``input`` is used, as prompts) with ``.data_ready``."""
    rows = [{"input": r["prompt"], "output": r["chosen"]} for r in preference_rows(n_train + 8, seed=3)]
    write_jsonl(out / "training.jsonl", rows[:n_train])
    write_jsonl(out / "validation.jsonl", rows[n_train:n_train + 4])
    write_jsonl(out / "test.jsonl", rows[n_train + 4:])
    (out / ".data_ready").write_text("ready")
    return out
