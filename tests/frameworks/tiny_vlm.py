"""A tiny, offline Qwen3-VL stand-in and image + conversation data for the multimodal accelerate scripts.

* :func:`make_vlm`: a 2-layer Qwen3-VL (text hidden 64, vision tower of 2 blocks, hidden 32) with a byte-level BPE
  tokenizer trained here (Qwen's special tokens), a ChatML chat template and a Qwen2-VL image processor (patch 16,
  merge 2, 32..64 pixel sides), saved as a model directory the way a hub snapshot is.
* :func:`make_color_rows` / :func:`write_data_dir`: generated images (noisy squares of one colour on a grey
  background, sizes 32..64) with "What colour is the square?" conversations; the answer is only in the image.

transformers builds the Qwen-VL processors' video part only with torchvision; the processor saved here therefore
has no video-processor config (like the scripts' image-only fallback).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

COLORS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 60, 220), "yellow": (230, 220, 30)}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QUESTIONS = ["What colour is the square?", "Which colour do you see?", "Name the colour of the shape."]
TEXT_ONLY = [("Say hello.", "hello"), ("Count to three.", "one two three")]


def _corpus() -> list[str]:
    lines = []
    for question in QUESTIONS:
        for color in COLORS:
            lines.append(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{color}<|im_end|>\n")
    for question, answer in TEXT_ONLY:
        lines.append(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n")
    lines += ["system user assistant image picture colour square shape"] * 5
    return lines


def make_processor(out: Path) -> Any:
    """Train the tokenizer and save tokenizer + image processor + chat template as a Qwen3-VL processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessorPil

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    image_processor = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                               size={"shortest_edge": 32 * 32, "longest_edge": 64 * 64})
    processor = _image_only_processor_class()(image_processor=image_processor, tokenizer=tokenizer,
                                              chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    return processor


def make_vlm(out: Path, seed: int = 0) -> Path:
    """The tiny Qwen3-VL model directory (weights, config, processor files)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    processor = make_processor(out)
    tokenizer = processor.tokenizer
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen3VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 512, "tie_word_embeddings": False,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                         "mrope_interleaved": True},
                     "pad_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"]},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
                       "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "num_position_embeddings": 64, "deepstack_visual_indexes": [0]},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32)
    with torch.no_grad():  # a random LM head behind a unit-weight norm caps every logit near 1: let it say "sure"
        model.model.language_model.norm.weight.fill_(8.0)
    model.save_pretrained(out)
    return out


def make_image(path: Path, color: str, rng: random.Random) -> None:
    """A noisy square of ``color`` on a grey background (sides 32..64 pixels)."""
    import numpy as np
    from PIL import Image

    width, height = rng.choice([32, 48, 64]), rng.choice([32, 48, 64])
    noise = np.random.default_rng(rng.randrange(1 << 30))
    pixels = np.full((height, width, 3), 128, dtype=np.int16) + noise.integers(-20, 21, (height, width, 3))
    side = min(width, height) // 2
    top, left = rng.randrange(height - side + 1), rng.randrange(width - side + 1)
    pixels[top:top + side, left:left + side] = np.array(COLORS[color]) + noise.integers(-15, 16, (side, side, 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path)


def make_color_rows(image_dir: Path, n: int, seed: int = 0, prefix: str = "img", rel_to: Path | None = None,
                    text_only: int = 0) -> list[dict[str, Any]]:
    """``n`` rows ``{"image": <path>, "conversations": [...]}`` (images written to ``image_dir``; paths relative to
    ``rel_to`` when given), plus ``text_only`` rows without an image."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    names = list(COLORS)
    for i in range(n):
        color = names[i % len(names)]
        path = image_dir / f"{prefix}_{i:04d}.png"
        make_image(path, color, rng)
        rows.append({"image": str(path.relative_to(rel_to)) if rel_to else str(path),
                     "conversations": [{"from": "human", "value": f"<image>\n{rng.choice(QUESTIONS)}"},
                                       {"from": "gpt", "value": color}]})
    for i in range(text_only):
        question, answer = TEXT_ONLY[i % len(TEXT_ONLY)]
        rows.append({"conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]})
    rng.shuffle(rows)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Rows as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_data_dir(out: Path, n_train: int = 48, n_val: int = 8, n_test: int = 4, text_only: int = 2,
                   ready: bool = False) -> Path:
    """A ``--data_dir`` with ``training.jsonl`` / ``validation.jsonl`` / ``test.jsonl`` and ``images/`` (relative
    paths), optionally with ``.data_ready``."""
    images = out / "images"
    write_jsonl(out / "training.jsonl", make_color_rows(images, n_train, 1, "train", out, text_only))
    write_jsonl(out / "validation.jsonl", make_color_rows(images, n_val, 2, "val", out))
    write_jsonl(out / "test.jsonl", make_color_rows(images, n_test, 3, "test", out))
    if ready:
        (out / ".data_ready").write_text("ready")
    return out


def _image_only_processor_class() -> type:
    """``Qwen3VLProcessor`` without its video processor (which transformers builds only with torchvision)."""
    from transformers import Qwen3VLProcessor

    class ImageOnlyProcessor(Qwen3VLProcessor):
        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    ImageOnlyProcessor.__name__ = ImageOnlyProcessor.__qualname__ = "Qwen3VLProcessor"  # what save_pretrained names
    return ImageOnlyProcessor


def load_processor(path: Path) -> Any:
    """The processor saved in ``path`` (image processor + tokenizer + chat template; no video part)."""
    return _image_only_processor_class().from_pretrained(path)
