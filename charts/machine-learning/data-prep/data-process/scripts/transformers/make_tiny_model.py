"""Build the inputs the framework examples need, offline: a tiny causal LM from a config (Qwen3 or Llama) with a
byte-level BPE tokenizer trained here, and small local datasets in the shapes the framework scripts read.

    python3 /etc/framework-scripts/make_tiny_model.py --model-dir /fsx/pretrained-models/tiny/qwen3 \
        --data-dir /fsx/datasets/tiny

writes ``<model-dir>`` (config.json, model.safetensors, tokenizer files) and under ``<data-dir>``:
``instructions/data.jsonl`` (alpaca-style instruction / input / output rows, for ``--hfdc_dataset_name``),
``preferences/data.jsonl`` (prompt / chosen / rejected, for the reward-model and DPO scripts) and
``text/data.jsonl`` (plain text, for continual pre-training). Nothing is downloaded; the rules in the data are
simple enough that a tiny model visibly learns them in a few dozen steps on a CPU.

One file, standard library plus tokenizers, transformers and torch (imported when used): ``data-prep/data-process``
ships it as ``scripts/transformers/make_tiny_model.py`` (``framework: transformers``, a copy made by ``make
scripts``), so the framework examples' model step runs it from ``/etc/framework-scripts`` on every backend.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white", "pink", "brown"]
ANIMALS = ["cat", "dog", "horse", "mouse", "tiger", "lion", "zebra", "panda", "eagle", "shark"]
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def instructions(count: int, rng: random.Random) -> list[dict[str, str]]:
    """Three learnable tasks: spell digits, repeat a colour, capitalise an animal."""
    rows = []
    for i in range(count):
        if i % 3 == 0:
            digits = [rng.randrange(10) for _ in range(3)]
            rows.append({"instruction": "Spell the digits as words.", "input": " ".join(map(str, digits)),
                         "output": " ".join(DIGITS[d] for d in digits)})
        elif i % 3 == 1:
            color = rng.choice(COLORS)
            rows.append({"instruction": "Repeat the color twice.", "input": color, "output": f"{color} {color}"})
        else:
            animal = rng.choice(ANIMALS)
            rows.append({"instruction": "Name the animal in capitals.", "input": f"the {animal}",
                         "output": animal.upper()})
    return rows


def preferences(rows: list[dict[str, str]], rng: random.Random) -> list[dict[str, str]]:
    """Each instruction with its right answer (chosen) and a wrong one (rejected)."""
    out = []
    for row in rows:
        wrong = rng.choice([r["output"] for r in rows if r["output"] != row["output"]])
        prompt = f"{row['instruction']}\n{row['input']}"
        out.append({"prompt": prompt, "chosen": row["output"], "rejected": wrong})
    return out


def sentences(count: int) -> list[dict[str, str]]:
    return [{"text": f"The {ANIMALS[i % 10]} saw a {COLORS[(i * 3) % 10]} ball number {DIGITS[i % 10]} today."}
            for i in range(count)]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def build_tokenizer(texts: list[str], out: Path, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<unk>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                       show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(out)
    return fast


def build_model(kind: str, tokenizer, out: Path, hidden: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_cls: Any = Qwen3Config if kind == "qwen3" else LlamaConfig
    model_cls: Any = Qwen3ForCausalLM if kind == "qwen3" else LlamaForCausalLM
    config = config_cls(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=hidden // 2,
                        max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                        tie_word_embeddings=False)
    torch.manual_seed(seed)
    model_cls(config).to(torch.float32).save_pretrained(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="where the tiny model is written")
    parser.add_argument("--data-dir", type=Path, required=True, help="where the local datasets are written")
    parser.add_argument("--architecture", choices=["qwen3", "llama"], default="qwen3")
    parser.add_argument("--hidden-size", type=int, default=64, help="64 trains fast; 128 suits vLLM's CPU kernels")
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    rows = instructions(args.rows, rng)
    write_jsonl(args.data_dir / "instructions" / "data.jsonl", rows)
    write_jsonl(args.data_dir / "preferences" / "data.jsonl", preferences(rows, rng))
    write_jsonl(args.data_dir / "text" / "data.jsonl", sentences(200))
    texts = [f"### Instruction:\n{r['instruction']}\n ### Input:\n{r['input']}\n### Response:\n{r['output']}"
             for r in instructions(300, random.Random(args.seed + 1))] + [s["text"] for s in sentences(200)]
    if (args.model_dir / "config.json").is_file():
        print(f"model {args.model_dir} exists: kept", flush=True)
    else:
        args.model_dir.mkdir(parents=True, exist_ok=True)
        tokenizer = build_tokenizer(texts, args.model_dir, vocab_size=400)
        build_model(args.architecture, tokenizer, args.model_dir, args.hidden_size, args.seed)
        print(f"model {args.architecture} (hidden {args.hidden_size}, 2 layers) written to {args.model_dir}",
              flush=True)
    print(f"datasets written to {args.data_dir}: instructions, preferences, text ({args.rows} rows each)", flush=True)


if __name__ == "__main__":
    main()
