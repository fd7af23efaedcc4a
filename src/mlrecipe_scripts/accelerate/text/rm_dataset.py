"""Preference (chosen / rejected) datasets for the reward-model, DPO and PPO trainers.

* :class:`RMDatasetConfig` (CLI flags ``--rmdc_*``) says which dataset to load. A row must have ``chosen`` and
  ``rejected`` text columns; ``input`` (or, failing that, ``prompt``) becomes the shared prompt. Anything else
  needs a ``custom_converter`` (not on the CLI).
* :func:`prepare_rm_datasets` writes ``training.jsonl``, ``validation.jsonl``, ``test.jsonl`` (objects
  ``{"chosen", "rejected"[, "input"]}``) and the marker ``.data_ready`` into ``data_dir``, exactly like the SFT
  ``prepare_datasets``: only global rank 0 prepares, other ranks wait for the marker, an existing marker means
  nothing is loaded (the offline path), and a local directory of ``*.jsonl`` / ``*.json`` / ``*.csv`` /
  ``*.parquet`` files works as ``dataset_name``. Files are written to a temporary directory and renamed.
* :class:`RewardModelDataset`: ``input + chosen`` and ``input + rejected`` tokenized (special tokens on,
  truncated to ``max_seq_length``). :class:`DPODataset` adds ``prompt_len``: ``len(tok(input))`` when the input
  is not empty, else the common token prefix of the two sequences; always clamped so that at least one
  completion token remains. :class:`PairCollator` pads both sides of every pair to one common length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import ScriptError, log
from mlrecipe_scripts.hf_trainer.text_dataset import (
    SPLIT_FILES,
    _load_rows,
    _write_jsonl,
    default_data_dir,
    prepare_on_rank_zero,
    read_jsonl,
    split_indices,
    staged_data_dir,
)


@dataclass
class RMDatasetConfig:
    """Which preference dataset to load (flags ``--rmdc_<field>``).

    ``load_kwargs`` and ``custom_converter`` (a function ``row -> {"chosen", "rejected"[, "input"]}``) are not on
    the CLI.
    """

    dataset_name: str
    dataset_config: str | None = None
    split: str = "train"
    train_split_ratio: float = 0.9
    val_test_split_ratio: float = 0.5
    num_proc: int = 8
    load_kwargs: dict = field(default_factory=dict)
    custom_converter: Callable[[dict], dict] | None = None


RMDC_NOT_ON_CLI = ("load_kwargs", "custom_converter")


def rm_default_config() -> RMDatasetConfig:
    """The preference scripts' default dataset (used when no ``--rmdc_*`` flag is given)."""
    return RMDatasetConfig(dataset_name="Anthropic/hh-rlhf")


def default_rm_data_dir(config: RMDatasetConfig, home: Path | None = None) -> Path:
    """``$HOME/datasets/<name with / -> _>/<config or default>/train=T%-val=V%-test=S%`` (as for SFT data)."""
    return default_data_dir(config, home)  # type: ignore[arg-type]  # same fields are used


def _text(value: Any, column: str, config: RMDatasetConfig) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    raise ScriptError(f"--rmdc_dataset_name={config.dataset_name}: column '{column}' holds "
                      f"{type(value).__name__}, not text (conversation lists need a custom_converter)")


def convert_rm_row(row: dict[str, Any], config: RMDatasetConfig) -> dict[str, str]:
    """One dataset row -> ``{"chosen", "rejected"}`` plus ``"input"`` (from ``input``, else ``prompt``) if present."""
    if config.custom_converter is not None:
        out = config.custom_converter(row)
        if not isinstance(out, dict) or "chosen" not in out or "rejected" not in out:
            raise ScriptError(f"--rmdc_dataset_name={config.dataset_name}: the custom converter must return "
                              "a dict with 'chosen' and 'rejected'")
        return {k: _text(v, k, config) for k, v in out.items() if k in ("input", "chosen", "rejected")}
    if "chosen" not in row or "rejected" not in row:
        raise ScriptError(f"--rmdc_dataset_name={config.dataset_name}: a row has no 'chosen'/'rejected' columns "
                          f"(columns: {sorted(row)}); preference data needs both (plus an optional input/prompt)")
    result = {"chosen": _text(row["chosen"], "chosen", config), "rejected": _text(row["rejected"], "rejected", config)}
    if "input" in row or "prompt" in row:
        column = "input" if "input" in row else "prompt"
        result["input"] = _text(row[column], column, config)
    return result


def _load(config: RMDatasetConfig) -> Any:
    """``dataset_module._load_rows`` with the error messages naming the ``--rmdc_*`` flags."""
    try:
        return _load_rows(config)  # type: ignore[arg-type]  # same fields are used
    except ScriptError as exc:
        raise ScriptError(str(exc).replace("--hfdc_", "--rmdc_")) from None


def _build(config: RMDatasetConfig, data_dir: Path) -> None:
    if not 0 < config.train_split_ratio < 1:
        raise ScriptError(f"--rmdc_train_split_ratio={config.train_split_ratio}: must be between 0 and 1 "
                          "(exclusive)")
    log(f"preparing preference dataset {config.dataset_name} ({config.dataset_config or 'default'}, "
        f"split {config.split}) into {data_dir}")
    rows = _load(config)
    n = len(rows)
    if n == 0:
        raise ScriptError(f"--rmdc_dataset_name={config.dataset_name}: split '{config.split}' has no rows")
    parts = split_indices(n, config.train_split_ratio, config.val_test_split_ratio)
    if not parts["train"]:
        raise ScriptError(f"--rmdc_dataset_name={config.dataset_name}: only {n} rows, none left for training")
    with staged_data_dir(data_dir) as tmp:
        counts = {split: _write_jsonl(tmp / fname, (convert_rm_row(rows[i], config) for i in parts[split]))
                  for split, fname in SPLIT_FILES.items()}
    log(f"preference dataset ready in {data_dir}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def prepare_rm_datasets(config: RMDatasetConfig, dataset_root: Path | str, rank: int | None = None,
                        poll_seconds: float = 5.0) -> Path:
    """Make sure ``dataset_root`` holds the three jsonl files and ``.data_ready``; returns it
    (``prepare_on_rank_zero``: global rank 0 prepares unless the marker exists, the other ranks poll for it)."""
    return prepare_on_rank_zero(dataset_root, lambda data_dir: _build(config, data_dir), rank, poll_seconds)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class RewardModelDataset:
    """Pairs for reward modelling: ``input + chosen`` and ``input + rejected``, tokenized per item.

    A row without an ``input`` key uses ``chosen`` / ``rejected`` as the whole texts (e.g. Anthropic HH dialogues).
    """

    def __init__(self, path: Path | str, tokenizer: Any, max_seq_length: int, max_samples: int | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise ScriptError(f"{self.path}: no such file (is --data_dir complete?)")
        self.rows = read_jsonl(self.path, max_samples)
        for number, row in enumerate(self.rows, 1):
            if not isinstance(row, dict) or "chosen" not in row or "rejected" not in row:
                raise ScriptError(f"{self.path}: row {number} has no 'chosen'/'rejected' (not preference data?)")
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    def __len__(self) -> int:
        return len(self.rows)

    def texts(self, index: int) -> tuple[str, str, str]:
        """(prompt, chosen text, rejected text) of one row; the texts include the prompt."""
        row = self.rows[index]
        prompt = str(row.get("input") or "")
        return prompt, prompt + str(row["chosen"] or ""), prompt + str(row["rejected"] or "")

    def _tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, truncation=True, max_length=self.max_seq_length)["input_ids"])

    def __getitem__(self, index: int) -> dict[str, Any]:
        _, chosen, rejected = self.texts(index)
        ids_c, ids_r = self._tokenize(chosen), self._tokenize(rejected)
        return {"input_ids_chosen": ids_c, "attention_mask_chosen": [1] * len(ids_c),
                "input_ids_rejected": ids_r, "attention_mask_rejected": [1] * len(ids_r)}


class DPODataset(RewardModelDataset):
    """Reward-model pairs plus ``prompt_len``: how many leading tokens are prompt (not scored by DPO)."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = super().__getitem__(index)
        prompt, _, _ = self.texts(index)
        ids_c, ids_r = item["input_ids_chosen"], item["input_ids_rejected"]
        prompt_len = len(self.tokenizer(prompt)["input_ids"]) if prompt else common_prefix_length(ids_c, ids_r)
        # at least one completion token on both sides (truncation can eat the completion)
        prompt_len = max(0, min(prompt_len, len(ids_c) - 1, len(ids_r) - 1))
        item["prompt_len"] = prompt_len
        return item


class PairCollator:
    """Pads chosen and rejected of a batch to one common length (a multiple of 8) with the tokenizer's pad id.

    Padding is on the right; ``prompt_lens`` (DPO) is passed through as a tensor.
    """

    def __init__(self, tokenizer: Any, pad_to_multiple_of: int = 8):
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.multiple = max(1, pad_to_multiple_of)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        longest = max(max(len(f["input_ids_chosen"]), len(f["input_ids_rejected"])) for f in features)
        width = -(-longest // self.multiple) * self.multiple
        batch: dict[str, Any] = {}
        for side in ("chosen", "rejected"):
            ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(features), width), dtype=torch.long)
            for i, f in enumerate(features):
                seq = f[f"input_ids_{side}"]
                ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[i, : len(seq)] = 1
            batch[f"input_ids_{side}"], batch[f"attention_mask_{side}"] = ids, mask
        if "prompt_len" in features[0]:
            batch["prompt_lens"] = torch.tensor([f["prompt_len"] for f in features], dtype=torch.long)
        return batch


def config_fields() -> list[str]:
    """Names of the RMDatasetConfig fields that have a ``--rmdc_*`` flag."""
    return [f.name for f in dataclasses.fields(RMDatasetConfig) if f.name not in RMDC_NOT_ON_CLI]
