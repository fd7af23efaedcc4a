"""Text datasets for the accelerate and the ray_train trainers: configuration, preparation into ``data_dir``, torch
datasets. One file for both trees (the ray_train tree links ``text/dataset_module.py`` to it).

* :class:`HFDatasetConfig` (CLI flags ``--hfdc_*``) says which dataset to load and how to turn a row into
  ``{"input": str, "output": str}`` with two ``str.format`` templates (optionally through ``field_mapping``).
* :func:`prepare_datasets` writes ``training.jsonl``, ``validation.jsonl``, ``test.jsonl`` and the marker
  ``.data_ready`` into ``data_dir``. Only global rank 0 prepares; the other ranks wait for the marker. When the
  marker exists nothing is loaded at all: pre-populating ``data_dir`` is the offline path. A local directory of
  ``*.jsonl`` / ``*.json`` / ``*.csv`` / ``*.parquet`` files works as ``dataset_name``.
* :class:`SFTDataset` (prompt tokens masked with -100 in the labels) and :class:`CPTDataset` (every token is a
  target), plus :func:`make_collator`.
* :func:`load_and_prepare_datasets`: what each Ray Train worker calls (world rank 0 prepares, every rank then
  opens the training and validation files).

Difference from the reference's ray_train copy: the default templates contain real newlines (the reference writes
``\\n`` there, so its prompts hold a literal backslash-n); templates given on the command line are used as given,
as in the reference (no unescaping). The split is seeded (seed 42), so it is reproducible.

``datasets`` / ``transformers`` are imported only where needed, so a pre-populated ``data_dir`` needs neither
for preparation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import re
import shutil
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.dataset_config import HFDC_NOT_ON_CLI, HFDatasetConfig
from mlrecipe_scripts.hf_trainer.common_base import ScriptError, global_rank, home_dir, log, short_error

READY_MARKER = ".data_ready"
SPLIT_FILES = {"train": "training.jsonl", "validation": "validation.jsonl", "test": "test.jsonl"}
PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")
SPLIT_SEED = 42


def sft_default_config() -> HFDatasetConfig:
    """The SFT scripts' default dataset (used when no ``--hfdc_*`` flag is given)."""
    return HFDatasetConfig.sft_default()


def cpt_default_config() -> HFDatasetConfig:
    """The CPT scripts' default dataset (used when no ``--hfdc_*`` flag is given)."""
    return HFDatasetConfig(
        dataset_name="wikimedia/wikipedia",
        dataset_config="20231101.en",
        train_split_ratio=0.995,
        input_template="",
        output_template="{text}",
        field_mapping=None,
    )


def split_percentages(config: HFDatasetConfig, decimals: int = 0) -> tuple[float, float, float]:
    """(train, val, test) percentages as the default ``data_dir`` names them."""
    if decimals == 0:
        train = int(config.train_split_ratio * 100)
        val = int((100 - train) * (1 - config.val_test_split_ratio))
        return train, val, 100 - train - val
    train_f = round(config.train_split_ratio * 100, decimals)
    val_f = round((100 - train_f) * (1 - config.val_test_split_ratio), decimals)
    return train_f, val_f, round(100 - train_f - val_f, decimals)


def default_data_dir(config: HFDatasetConfig, home: Path | None = None, decimals: int = 0) -> Path:
    """``$HOME/datasets/<name with / -> _>/<config or default>/train=T%-val=V%-test=S%``.

    The SFT scripts use whole percentages (``train=90%-val=5%-test=5%``), CPT two decimals
    (``train=99.50%-val=0.25%-test=0.25%``).
    """
    t, v, s = split_percentages(config, decimals)
    fmt = (lambda x: f"{int(x)}") if decimals == 0 else (lambda x: f"{x:.{decimals}f}")
    name = config.dataset_name.replace("/", "_")
    return (home or home_dir()) / "datasets" / name / (config.dataset_config or "default") / \
        f"train={fmt(t)}%-val={fmt(v)}%-test={fmt(s)}%"


def convert_row(row: dict[str, Any], config: HFDatasetConfig) -> dict[str, str]:
    """One dataset row -> ``{"input": ..., "output": ...}`` using the templates (and the field mapping).

    With ``field_mapping`` each ``{placeholder}`` is filled from ``row[mapping.get(placeholder, placeholder)]``
    (a missing column gives ""); without it ``template.format(**row)`` is used and a missing column is an error.
    """
    if config.custom_converter is not None:
        out = config.custom_converter(row)
        return {"input": str(out.get("input", "")), "output": str(out.get("output", ""))}
    if config.field_mapping is not None:
        mapping = config.field_mapping

        def fill(template: str) -> str:
            values = {ph: row.get(mapping.get(ph, ph), "") for ph in PLACEHOLDER_RE.findall(template)}
            values = {k: "" if v is None else v for k, v in values.items()}
            return template.format(**values)

        return {"input": fill(config.input_template), "output": fill(config.output_template)}
    try:
        return {"input": config.input_template.format(**row), "output": config.output_template.format(**row)}
    except KeyError as exc:
        raise ScriptError(
            f"--hfdc_dataset_name={config.dataset_name}: a row has no column {exc} used by the templates "
            f"(columns: {sorted(row)}); pass --hfdc_input_template/--hfdc_output_template or --hfdc_field_mapping"
        ) from None


def _load_rows(config: HFDatasetConfig) -> Any:
    """Load ``config.split`` of the dataset (a hub id or a local directory) as a ``datasets.Dataset``."""
    try:
        import datasets
    except ImportError as exc:
        raise ScriptError("preparing a dataset needs the 'datasets' package (or pre-populate --data_dir)") from exc
    name = config.dataset_name
    local = Path(name).expanduser()
    if local.exists() and not local.is_dir():
        raise ScriptError(f"--hfdc_dataset_name={name}: a file is not a dataset; put it in a directory and pass "
                          "the directory")
    if local.is_dir():
        data_files = [p for p in local.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".csv",
                                                                                  ".parquet", ".txt")]
        if not data_files:
            raise ScriptError(f"--hfdc_dataset_name={name}: the directory holds no .jsonl/.json/.csv/.parquet file")
        if all(p.stat().st_size == 0 for p in data_files):
            raise ScriptError(f"--hfdc_dataset_name={name}: the dataset is empty (all its files are empty)")
    kwargs = dict(config.load_kwargs)
    if config.num_proc and config.num_proc > 1 and not local.is_dir():
        kwargs.setdefault("num_proc", config.num_proc)
    try:
        loaded = datasets.load_dataset(str(local) if local.is_dir() else name, config.dataset_config, **kwargs)
    except Exception as exc:
        raise ScriptError(f"--hfdc_dataset_name={name}: cannot load it ({short_error(exc)})") from exc
    if isinstance(loaded, datasets.DatasetDict):
        if config.split not in loaded:
            raise ScriptError(f"--hfdc_split={config.split}: the dataset {name} has splits {sorted(loaded)}")
        loaded = loaded[config.split]
    return loaded


def split_indices(n: int, train_ratio: float, val_test_ratio: float, seed: int = SPLIT_SEED
                  ) -> dict[str, list[int]]:
    """Shuffle ``range(n)`` and cut it into train / validation / test.

    The held-out share is ``ceil((1 - train_ratio) * n)``; of it, ``val_test_ratio`` goes to test (rounded up) and
    the rest to validation. A ratio <= 0 puts all of the held-out rows in validation, >= 1 all of them in test.
    """
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_held = min(n, math.ceil(round((1 - train_ratio) * n, 6)))
    train, held = order[: n - n_held], order[n - n_held:]
    if val_test_ratio <= 0:
        n_test = 0
    elif val_test_ratio >= 1:
        n_test = len(held)
    else:
        n_test = math.ceil(round(val_test_ratio * len(held), 6))
    return {"train": train, "validation": held[: len(held) - n_test], "test": held[len(held) - n_test:]}


def _write_jsonl(path: Path, rows: Any) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _build(config: HFDatasetConfig, data_dir: Path) -> None:
    """Load, convert, split and write the three files plus the marker (into a temporary dir, then rename)."""
    if not 0 < config.train_split_ratio < 1:
        raise ScriptError(f"--hfdc_train_split_ratio={config.train_split_ratio}: must be between 0 and 1 "
                          "(exclusive)")
    log(f"preparing dataset {config.dataset_name} ({config.dataset_config or 'default'}, split {config.split}) "
        f"into {data_dir}")
    rows = _load_rows(config)
    n = len(rows)
    if n == 0:
        raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: split '{config.split}' has no rows")
    parts = split_indices(n, config.train_split_ratio, config.val_test_split_ratio)
    if not parts["train"]:
        raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: only {n} rows, none left for training")

    def converted(indices: list[int]) -> Any:
        for i in indices:
            yield convert_row(rows[i], config)

    with staged_data_dir(data_dir) as tmp:
        counts = {split: _write_jsonl(tmp / fname, converted(parts[split])) for split, fname in SPLIT_FILES.items()}
    log(f"dataset ready in {data_dir}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


@contextlib.contextmanager
def staged_data_dir(data_dir: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``data_dir`` to write the prepared files into. When the block succeeds the marker
    is written and the content becomes ``data_dir`` (moved into an existing directory, e.g. an empty one made by
    hand, entry by entry, the marker last); when it fails the temporary directory is removed."""
    tmp = data_dir.parent / f".{data_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        (tmp / READY_MARKER).write_text("ready")
        if data_dir.exists():
            for entry in sorted(tmp.iterdir(), key=lambda p: p.name == READY_MARKER):
                target = data_dir / entry.name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(entry, target)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, data_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare_on_rank_zero(dataset_root: Path | str, build: Callable[[Path], None], rank: int | None = None,
                         poll_seconds: float = 5.0) -> Path:
    """Make sure ``dataset_root`` holds the prepared files and ``.data_ready``; returns ``dataset_root``.

    Global rank 0 (``rank``, default ``RANK``) calls ``build(data_dir)`` unless the marker already exists; other
    ranks poll for the marker every ``poll_seconds`` (``data_dir`` must therefore be on storage the nodes share).
    """
    data_dir = Path(dataset_root).expanduser()
    marker = data_dir / READY_MARKER
    if marker.exists():
        log(f"dataset already prepared in {data_dir} ({READY_MARKER} found): nothing is loaded")
        return data_dir
    rank = global_rank() if rank is None else rank
    if rank == 0:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        build(data_dir)
        return data_dir
    log(f"rank {rank}: waiting for rank 0 to prepare {data_dir}")
    while not marker.exists():
        time.sleep(poll_seconds)
    return data_dir


def prepare_datasets(config: HFDatasetConfig, dataset_root: Path | str, rank: int | None = None,
                     poll_seconds: float = 5.0) -> Path:
    """Make sure ``dataset_root`` holds the three jsonl files and ``.data_ready``; returns ``dataset_root``
    (:func:`prepare_on_rank_zero`)."""
    return prepare_on_rank_zero(dataset_root, lambda data_dir: _build(config, data_dir), rank, poll_seconds)


def read_jsonl(path: Path | str, limit: int | None = None) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file (blank lines skipped), at most ``limit`` of them."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise ScriptError(f"{path}:{number}: not a JSON line ({exc})") from None
    return rows


class SFTDataset:
    """Supervised fine-tuning samples: ``input + output`` tokenized, the prompt tokens masked in the labels.

    ids = tok(input + output) (truncated to ``max_seq_length``, special tokens on); labels = ids with the first
    ``len(tok(input))`` positions set to -100. Tokenization happens per item, on the first fetch (so DataLoader
    workers share it); each process keeps the token ids of the items it has fetched, up to ``cache_tokens`` tokens
    (4 bytes each), so that a later epoch over a small dataset does not tokenize again.
    """

    mask_prompt = True
    cache_tokens = 8 * 2**20  #: tokens kept per process (32 MiB); items past it are tokenized on every fetch

    def __init__(self, path: Path | str, tokenizer: Any, max_seq_length: int, max_samples: int | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise ScriptError(f"{self.path}: no such file (is --data_dir complete?)")
        self.rows = read_jsonl(self.path, max_samples)
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self._cache: dict[int, tuple[array, int, array | None]] = {}
        self._cached_tokens = 0

    def __len__(self) -> int:
        return len(self.rows)

    def _encode(self, index: int) -> tuple[array, int, array | None]:
        """(token ids, prompt tokens to mask, attention mask or None when it is all ones) of row ``index``."""
        row = self.rows[index]
        prompt, answer = str(row.get("input") or ""), str(row.get("output") or "")
        encoded = self.tokenizer(prompt + answer, truncation=True, max_length=self.max_seq_length)
        ids, mask = list(encoded["input_ids"]), list(encoded["attention_mask"])
        n_prompt = 0
        if self.mask_prompt and prompt:
            n_prompt = len(self.tokenizer(prompt, truncation=True, max_length=self.max_seq_length)["input_ids"])
        return array("i", ids), min(n_prompt, len(ids)), None if all(m == 1 for m in mask) else array("i", mask)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        found = self._cache.get(index)
        if found is None:
            found = self._encode(index)
            if self._cached_tokens + len(found[0]) <= self.cache_tokens:
                self._cache[index] = found
                self._cached_tokens += len(found[0])
        ids, n_prompt, mask = found
        input_ids = ids.tolist()
        return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids) if mask is None else mask.tolist(),
                "labels": [-100] * n_prompt + input_ids[n_prompt:]}


class CPTDataset(SFTDataset):
    """Continual pre-training samples: the text is ``input + output`` and every token is a target."""

    mask_prompt = False


def make_collator(tokenizer: Any, pad_to_multiple_of: int | None = 8) -> Any:
    """``DataCollatorForSeq2Seq``: each batch padded to its longest row (rounded up to a multiple of
    ``pad_to_multiple_of``; None: not rounded), labels padded with -100."""
    from transformers import DataCollatorForSeq2Seq

    return DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=pad_to_multiple_of,
                                  label_pad_token_id=-100)


def config_fields() -> list[str]:
    """Names of the HFDatasetConfig fields that have a ``--hfdc_*`` flag."""
    return [f.name for f in dataclasses.fields(HFDatasetConfig) if f.name not in HFDC_NOT_ON_CLI]


def load_and_prepare_datasets(config: HFDatasetConfig, dataset_root: Path | str, tokenizer: Any,
                              max_seq_length: int = 2048, rank: int = 0, dataset_cls: type = SFTDataset,
                              max_eval_samples: int | None = None, poll_seconds: float | None = None
                              ) -> tuple[SFTDataset, SFTDataset]:
    """(training, validation) datasets of ``dataset_root`` for one Ray Train worker.

    World rank ``rank`` 0 prepares ``dataset_root`` (unless ``.data_ready`` is there), the other ranks wait for the
    marker, then all ranks meet at a barrier (when a process group exists) and open the files. The validation set
    is capped at ``max_eval_samples`` rows. ``poll_seconds`` defaults to ``MLRECIPE_DATA_POLL_SECONDS`` or 10.
    """
    if poll_seconds is None:
        poll_seconds = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "10"))
    data_dir = prepare_datasets(config, dataset_root, rank=rank, poll_seconds=poll_seconds)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
    except ImportError:
        pass
    train = dataset_cls(data_dir / SPLIT_FILES["train"], tokenizer, max_seq_length)
    evaluation = dataset_cls(data_dir / SPLIT_FILES["validation"], tokenizer, max_seq_length, max_eval_samples)
    return train, evaluation
