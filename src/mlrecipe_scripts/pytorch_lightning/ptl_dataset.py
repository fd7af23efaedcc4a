"""Text SFT data for the Lightning fine-tuning: configuration, preparation into ``data_dir``, dataset, DataModule.

* :class:`HFDatasetConfig` (flags ``--hfdc_*``): which dataset to load (a hub id or a local directory of
  ``*.jsonl`` / ``*.json`` / ``*.csv`` / ``*.parquet``) and how a row becomes ``{"input": str, "output": str}``
  through two ``str.format`` templates (optionally through ``field_mapping``). Values are ``str()``-ed and None
  becomes ""; a row that cannot be formatted, or whose output is empty, is skipped.
* :func:`prepare_dataset_files` writes ``training.jsonl``, ``validation.jsonl``, ``test.jsonl`` and the marker
  ``.data_ready`` into ``data_dir`` (split with seed 42 like the reference). Global rank 0 prepares; other ranks
  poll for the marker. When the marker exists nothing is loaded: pre-populating ``data_dir`` is the offline path.
* :class:`SFTDataset`: the input tokenized with special tokens, the output without; when too long, the input is
  cut from the left so that the output survives; samples whose output is empty, has fewer than
  ``min_output_tokens`` tokens or at least ``max_seq_length`` tokens are dropped at load time. Labels mask the input.
* :class:`GeneralizedHFDataModule`: the ``LightningDataModule`` (pads with pad id / -100 / 0).

``datasets`` is imported only to prepare data, ``transformers`` only in ``setup``, Lightning only when
:class:`GeneralizedHFDataModule` is first used.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.lightning_core.sft_data import (
    READY_MARKER,
    SPLIT_FILES,
    CheckedHFDatasetConfig,
    default_data_dir,  # noqa: F401 - part of this module's interface (fine_tune.py, the tests)
    load_split,
    split_dataset,
    template_fields,
)
from mlrecipe_scripts.pytorch_lightning.ptl_common import ScriptError, log, short_error, wait_for


@dataclass
class HFDatasetConfig(CheckedHFDatasetConfig):
    """Which dataset to load and how to convert its rows (flags ``--hfdc_<field>``), plus ``cache_dir`` (passed to
    ``datasets.load_dataset``)."""

    cache_dir: str | None = None


def sft_default_config() -> HFDatasetConfig:
    """The script's default dataset (used when no ``--hfdc_*`` flag is given)."""
    return HFDatasetConfig.sft_default()


# --------------------------------------------------------------------------------------------------------------
# conversion and preparation


def convert_row(row: dict[str, Any], config: HFDatasetConfig) -> dict[str, str] | None:
    """One dataset row -> ``{"input", "output"}``, or None when the row cannot be converted (it is skipped).

    With ``field_mapping`` each placeholder is filled from ``row[mapping.get(placeholder, placeholder)]`` (a missing
    column gives ""); without it the row's own columns fill the templates. Values are ``str()``-ed, None gives "".
    """
    if config.custom_converter is not None:
        try:
            out = config.custom_converter(row)
        except Exception as exc:
            log(f"note: custom_converter failed on a row ({short_error(exc)}); skipped")
            return None
        if not isinstance(out, dict) or "input" not in out or "output" not in out:
            return None
        converted = {"input": str(out["input"] or ""), "output": str(out["output"] or "")}
    else:
        if config.field_mapping is not None:
            values = {ph: row.get(config.field_mapping.get(ph, ph), "") for ph in template_fields(config)}
        else:
            values = dict(row)
        values = {k: "" if v is None else str(v) for k, v in values.items()}
        try:
            converted = {"input": config.input_template.format(**values),
                         "output": config.output_template.format(**values)}
        except (KeyError, IndexError, ValueError):
            return None
    return converted if converted["output"].strip() else None


def _write_split(rows: Any, config: HFDatasetConfig, path: Path) -> tuple[int, int]:
    kept = skipped = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            converted = convert_row(row, config)
            if converted is None:
                skipped += 1
                continue
            fh.write(json.dumps(converted, ensure_ascii=False) + "\n")
            kept += 1
    return kept, skipped


def build_dataset_files(config: HFDatasetConfig, data_dir: Path) -> dict[str, int]:
    """Load, split, convert and write the three files plus the marker (via a temporary sibling directory)."""
    start = time.monotonic()
    log(f"preparing dataset {config.dataset_name} ({config.dataset_config or 'default'}, split {config.split}) "
        f"into {data_dir}")
    parts = split_dataset(load_split(config), config)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = data_dir.parent / f".{data_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    counts: dict[str, int] = {}
    try:
        for split, fname in SPLIT_FILES.items():
            kept, skipped = _write_split(parts[split], config, tmp / fname)
            counts[split] = kept
            if skipped:
                log(f"  {split}: skipped {skipped} of {kept + skipped} rows (not convertible, or empty output)")
            if kept == 0 and split == "test":
                log("note: the test split is empty (test_checkpoint.py will need --test_path)")
            elif kept == 0:
                hint = "check --hfdc_input_template / --hfdc_output_template / --hfdc_field_mapping" if skipped else \
                    "use more rows or other --hfdc_train_split_ratio / --hfdc_val_test_split_ratio"
                raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: no {split} rows ({hint})")
        (tmp / READY_MARKER).write_text("ready")
        if data_dir.exists():  # e.g. an empty directory made beforehand: move the files in, the marker last
            for fname in SPLIT_FILES.values():
                os.replace(tmp / fname, data_dir / fname)
            os.replace(tmp / READY_MARKER, data_dir / READY_MARKER)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, data_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"dataset ready in {data_dir} ({time.monotonic() - start:.1f}s): "
        + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return counts


def prepare_dataset_files(config: HFDatasetConfig, dataset_root: Path | str, is_global_zero: bool,
                          poll_seconds: float = 5.0) -> Path:
    """Make sure ``dataset_root`` holds the three jsonl files and ``.data_ready``; returns it.

    Global rank 0 prepares them unless the marker exists; other ranks poll for the marker every ``poll_seconds``
    (``data_dir`` must therefore be on storage that all nodes share).
    """
    data_dir = Path(dataset_root).expanduser()
    marker = data_dir / READY_MARKER
    if marker.exists():
        log(f"dataset already prepared in {data_dir} ({READY_MARKER} found): nothing is loaded")
        return data_dir
    if is_global_zero:
        build_dataset_files(config, data_dir)
        return data_dir
    log(f"waiting for global rank 0 to prepare {data_dir}")
    wait_for(marker, "the dataset", poll_seconds)
    return data_dir


def poll_seconds() -> float:
    """How often non-zero ranks look for ``.data_ready`` (5 s; ``MLRECIPE_DATA_POLL_SECONDS`` overrides)."""
    try:
        return max(0.05, float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5")))
    except ValueError:
        return 5.0


# --------------------------------------------------------------------------------------------------------------
# dataset


class SFTDataset:
    """Supervised fine-tuning samples from a ``{"input", "output"}`` JSON-lines file (see the module doc)."""

    def __init__(self, data_path: Path | str, tokenizer: Any, max_seq_length: int = 2048, is_test: bool = False,
                 min_output_tokens: int = 1, chunk: int = 1024):
        self.path = Path(data_path)
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.is_test = is_test
        self.min_output_tokens = min_output_tokens
        if not self.path.is_file():
            raise ScriptError(f"{self.path}: no such file (is the data_dir complete?)")
        start = time.monotonic()
        rows: list[dict[str, str]] = []
        bad = 0
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if not isinstance(row, dict) or not isinstance(row.get("input"), str) or \
                        not isinstance(row.get("output"), str) or not row["output"].strip():
                    bad += 1
                    continue
                rows.append(row)
        self.samples: list[dict[str, str]] = []
        too_long = too_short = 0
        for i in range(0, len(rows), chunk):
            batch = rows[i:i + chunk]
            encoded = tokenizer([r["output"] for r in batch], add_special_tokens=False)["input_ids"]
            lengths = [len(ids) for ids in encoded]
            for row, n in zip(batch, lengths, strict=True):
                if n >= max_seq_length:
                    too_long += 1
                elif n < min_output_tokens:
                    too_short += 1
                else:
                    self.samples.append(row)
        skipped = bad + too_long + too_short
        if not self.samples:
            raise ScriptError(f"{self.path}: no usable samples (of {len(rows) + bad} lines: {bad} not "
                              f"input/output JSON, {too_long} outputs of >= max_seq_length={max_seq_length} tokens, "
                              f"{too_short} outputs under {min_output_tokens} token(s))")
        note = f" (skipped {skipped}: {bad} malformed, {too_long} too long, {too_short} too short)" if skipped else ""
        log(f"loaded {len(self.samples)} samples from {self.path.name} in {time.monotonic() - start:.2f}s{note}")

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        sample = self.samples[index]
        prompt = list(self.tokenizer(sample["input"], add_special_tokens=True)["input_ids"])
        answer = list(self.tokenizer(sample["output"], add_special_tokens=False)["input_ids"])
        if len(prompt) + len(answer) > self.max_seq_length:
            room = self.max_seq_length - len(answer)
            if room < 1:  # cannot happen for samples kept at load time; kept for direct use
                answer = answer[: self.max_seq_length - 1]
                prompt = prompt[:1]
            else:
                prompt = prompt[-room:]  # keep the end of the prompt, next to the answer
        ids = prompt + answer
        return {"input_ids": ids, "labels": [-100] * len(prompt) + answer, "attention_mask": [1] * len(ids)}


def collate(batch: list[dict[str, list[int]]], pad_token_id: int) -> dict[str, Any]:
    """Right-pad ``input_ids`` with ``pad_token_id``, ``labels`` with -100, ``attention_mask`` with 0."""
    import torch

    longest = max(len(item["input_ids"]) for item in batch)

    def pad(key: str, value: int) -> Any:
        return torch.tensor([item[key] + [value] * (longest - len(item[key])) for item in batch], dtype=torch.long)

    return {"input_ids": pad("input_ids", pad_token_id), "labels": pad("labels", -100),
            "attention_mask": pad("attention_mask", 0)}


def _datamodule_class() -> type:
    """Build :class:`GeneralizedHFDataModule` on first use (Lightning is imported only then)."""
    import lightning.pytorch as pl

    class GeneralizedHFDataModule(pl.LightningDataModule):
        """``LightningDataModule`` over the prepared ``data_dir``; the tokenizer comes from ``tokenizer_name``."""

        def __init__(self, config: HFDatasetConfig, dataset_root: str | Path, tokenizer_name: str,
                     max_seq_length: int = 2048, micro_batch_size: int = 4, num_workers: int = 8,
                     pin_memory: bool = True,
                     persistent_workers: bool = False, min_output_tokens: int = 1):
            super().__init__()
            self.config = config
            self.dataset_root = Path(dataset_root).expanduser()
            self.tokenizer_name = tokenizer_name
            self.max_seq_length = max_seq_length
            self.micro_batch_size = micro_batch_size
            self.num_workers = num_workers
            self.pin_memory = pin_memory
            self.persistent_workers = persistent_workers
            self.min_output_tokens = min_output_tokens
            self.tokenizer: Any = None
            self.train_dataset: SFTDataset | None = None
            self.val_dataset: SFTDataset | None = None
            self.test_dataset: SFTDataset | None = None

        @property
        def train_path(self) -> Path:
            return self.dataset_root / SPLIT_FILES["train"]

        @property
        def validation_path(self) -> Path:
            return self.dataset_root / SPLIT_FILES["validation"]

        @property
        def test_path(self) -> Path:
            return self.dataset_root / SPLIT_FILES["test"]

        def prepare_data(self) -> None:
            """Write the files and the marker on global rank 0; other ranks wait for the marker."""
            trainer = getattr(self, "trainer", None)
            prepare_dataset_files(self.config, self.dataset_root, trainer is None or trainer.is_global_zero,
                                  poll_seconds())

        def setup(self, stage: str | None = None) -> None:
            """Load the tokenizer (once) and the datasets the stage needs (once)."""
            if self.tokenizer is None:
                from mlrecipe_scripts.pytorch_lightning.ptl_common import load_tokenizer

                self.tokenizer = load_tokenizer(self.tokenizer_name, "tokenizer_name")
            if stage in ("fit", "validate", None):
                if self.train_dataset is None:
                    self.train_dataset = SFTDataset(self.train_path, self.tokenizer, self.max_seq_length,
                                                    min_output_tokens=self.min_output_tokens)
                if self.val_dataset is None:
                    self.val_dataset = SFTDataset(self.validation_path, self.tokenizer, self.max_seq_length,
                                                  is_test=True,
                                                  min_output_tokens=self.min_output_tokens)
            if stage in ("test", None) and self.test_dataset is None:
                self.test_dataset = SFTDataset(self.test_path, self.tokenizer, self.max_seq_length, is_test=True,
                                               min_output_tokens=self.min_output_tokens)

        def collate_fn(self, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
            return collate(batch, self.tokenizer.pad_token_id)

        def _loader(self, dataset: Any, shuffle: bool) -> Any:
            from torch.utils.data import DataLoader

            return DataLoader(dataset, batch_size=self.micro_batch_size, shuffle=shuffle, num_workers=self.num_workers,
                              pin_memory=self.pin_memory,
                              persistent_workers=self.persistent_workers and self.num_workers > 0,
                              collate_fn=self.collate_fn)

        def train_dataloader(self) -> Any:
            return self._loader(self.train_dataset, shuffle=True)

        def val_dataloader(self) -> Any:
            return self._loader(self.val_dataset, shuffle=False)

        def test_dataloader(self) -> Any:
            return self._loader(self.test_dataset, shuffle=False)

    return GeneralizedHFDataModule


_CLASSES: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    """``GeneralizedHFDataModule`` is created lazily, so that importing this module does not import Lightning."""
    if name == "GeneralizedHFDataModule":
        if name not in _CLASSES:
            _CLASSES[name] = _datamodule_class()
        return _CLASSES[name]
    raise AttributeError(name)
