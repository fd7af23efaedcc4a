"""Tiny BERT encoders built from configs (no hub) and Triton model repositories for the encoder_transformers scripts.

Each model gets a word-level WordPiece tokenizer over :data:`WORDS`, saved beside its weights, so the
Triton models load everything from a local directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.data import data_dir

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "slow", "red", "blue", "green", "house", "car",
         "tree", "sky", "sun", "moon", "water", "fire", "what", "is", "paris", "capital", "of", "france", "berlin",
         "germany", "hello", "world", "query", "text", "model", "triton"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
HIDDEN = 32
SEQ_LABELS, TOKEN_LABELS = 3, 5
SCRIPTS = data_dir("charts") / "machine-learning" / "serving" / "triton-inference-server" / "scripts" / \
    "encoder_transformers"

#: model name -> (task script, model class, extra config, config.pbtxt inputs + outputs)
TASKS = {
    "embeddings": ("embeddings.py", "BertModel", {}, """
input [{ name: "text_input", data_type: TYPE_STRING, dims: [1] }]
output [{ name: "embeddings", data_type: TYPE_FP32, dims: [-1] }]"""),
    "masked_lm": ("masked_lm.py", "BertForMaskedLM", {}, """
input [{ name: "text_input", data_type: TYPE_STRING, dims: [1] }]
output [{ name: "logits", data_type: TYPE_FP32, dims: [-1, -1] }]"""),
    "sequence_classification": ("sequence_classification.py", "BertForSequenceClassification",
                                {"num_labels": SEQ_LABELS}, """
input [{ name: "text_input", data_type: TYPE_STRING, dims: [1] }]
output [{ name: "logits", data_type: TYPE_FP32, dims: [-1] }]"""),
    "token_classification": ("token_classification.py", "BertForTokenClassification",
                             {"num_labels": TOKEN_LABELS}, """
input [{ name: "text_input", data_type: TYPE_STRING, dims: [1] }]
output [{ name: "predictions", data_type: TYPE_INT64, dims: [-1] },
        { name: "logits", data_type: TYPE_FP32, dims: [-1, -1] }]"""),
    "reranker": ("reranker.py", "BertForSequenceClassification", {"num_labels": 1}, """
input [{ name: "query", data_type: TYPE_STRING, dims: [1] },
       { name: "texts", data_type: TYPE_STRING, dims: [-1] }]
output [{ name: "scores", data_type: TYPE_FP32, dims: [-1] }]"""),
}


def build_model(kind: str, out: Path, hidden: int = HIDDEN, layers: int = 2, heads: int = 2) -> Path:
    """Save a tiny random ``kind`` model (a key of :data:`TASKS`) and its tokenizer in ``out``."""
    import torch
    import transformers
    from transformers import BertConfig, BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL, *WORDS]) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    _, cls_name, extra, _ = TASKS[kind]
    config = BertConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=hidden + 5, max_position_embeddings=128, **extra)
    torch.manual_seed(0)
    getattr(transformers, cls_name)(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def config_pbtxt(name: str, kind: str, max_batch_size: int = 8) -> str:
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
            "model_transaction_policy { decoupled: false }\n"
            + ("dynamic_batching { max_queue_delay_microseconds: 1000 }\n" if kind != "reranker" else "")
            + TASKS[kind][3].strip() + "\ninstance_group [{ count: 1, kind: KIND_CPU }]\n")


def add_model(repo: Path, kind: str, model_dir: Path, name: str | None = None, **model_json) -> Path:
    """The reference's layout: ``<repo>/<name>/config.pbtxt``, ``1/model.py`` (the task script),
    ``1/encoder_base.py`` and ``1/model.json``."""
    name = name or kind
    version = repo / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config_pbtxt(name, kind), encoding="utf-8")
    (version / "model.py").write_text((SCRIPTS / TASKS[kind][0]).read_text(encoding="utf-8"), encoding="utf-8")
    (version / "encoder_base.py").write_text((SCRIPTS / "encoder_base.py").read_text(encoding="utf-8"),
                                             encoding="utf-8")
    (version / "model.json").write_text(json.dumps({"model_id_or_path": str(model_dir), **model_json}),
                                        encoding="utf-8")
    return repo / name
