"""Tiny, offline stand-ins for the reference recipes' inputs: a BPE tokenizer, a 2-layer Llama, instruction data.

Everything is generated here (no hub, no network) and saved the way a pre-downloaded model / dataset would be.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white", "pink", "brown"]
ANIMALS = ["cat", "dog", "horse", "mouse", "tiger", "lion", "zebra", "panda", "eagle", "shark"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def instruction_rows(n: int = 300, seed: int = 0) -> list[dict[str, str]]:
    """Rows with ``instruction`` / ``input`` / ``output`` columns (alpaca style) following simple, learnable rules."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            digits = [rng.randrange(10) for _ in range(3)]
            rows.append({"instruction": "Spell the digits as words.", "input": " ".join(map(str, digits)),
                         "output": " ".join(NUMBERS[d] for d in digits)})
        elif kind == 1:
            color = rng.choice(COLORS)
            rows.append({"instruction": "Repeat the color twice.", "input": color, "output": f"{color} {color}"})
        else:
            animal = rng.choice(ANIMALS)
            rows.append({"instruction": "Name the animal in capitals.", "input": f"the {animal}",
                         "output": animal.upper()})
    return rows


def corpus_lines() -> list[str]:
    """Text to train the tokenizer on: the instruction rows with the default templates, plus plain sentences."""
    lines = []
    for row in instruction_rows(300, seed=1):
        lines.append(f"### Instruction:\n{row['instruction']}\n ### Input:\n{row['input']}\n"
                     f"### Response:\n{row['output']}")
    for i in range(200):
        lines.append(f"The {ANIMALS[i % 10]} saw a {COLORS[(i * 3) % 10]} ball number {NUMBERS[i % 10]} today.")
    return lines


def make_tokenizer(out: Path, vocab_size: int = 400) -> object:
    """Train a byte-level BPE on :func:`corpus_lines` and save it in Hugging Face format."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(out)
    return fast


def make_model(out: Path, seed: int = 0, hidden_size: int = 64, heads: int = 4, kv_heads: int = 2) -> Path:
    """A 2-layer Llama (hidden 64, head_dim 16 by default) with its tokenizer, saved to ``out`` as a model dir.

    vLLM's CPU attention needs head_dim >= 32: use ``hidden_size=128, heads=2, kv_heads=2`` there.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer(out)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=256,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write rows as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_instruction_dataset(out: Path, n: int = 300) -> Path:
    """A local dataset directory (one ``data.jsonl``) usable as ``--hfdc_dataset_name``."""
    write_jsonl(out / "data.jsonl", instruction_rows(n))
    return out


def make_prepared_cpt_dir(out: Path, n_train: int = 64, n_val: int = 8) -> Path:
    """A pre-populated CPT ``data_dir``: the three jsonl files (``input`` "", ``output`` text) and ``.data_ready``."""
    rows = [{"input": "", "output": line} for line in corpus_lines()[300:]]
    write_jsonl(out / "training.jsonl", rows[:n_train])
    write_jsonl(out / "validation.jsonl", rows[n_train:n_train + n_val])
    write_jsonl(out / "test.jsonl", rows[n_train + n_val:n_train + 2 * n_val])
    (out / ".data_ready").write_text("ready")
    return out
