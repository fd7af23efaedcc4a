"""What the ``framework: pytorch_lightning`` and ``framework: nemo2`` SFT data preparation share (the
pytorch_lightning folder has this file, the nemo2 folder links ``sft_data.py`` to it): the ``data_dir`` layout and
names, the default ``data_dir``, loading the source split (a local directory of data files, or a hub id) and the
seeded train / validation / test split, and :class:`CheckedHFDatasetConfig`, the ``--hfdc_*`` configuration whose
split ratios are checked when it is made. Each framework's dataset module subclasses it as its own
``HFDatasetConfig`` (the ``--hfdc_*`` flags differ) and keeps its row conversion; ``config`` below is such a config.

``datasets`` is imported only to load a source.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.dataset_config import HFDC_NOT_ON_CLI, HFDatasetConfig
from mlrecipe_scripts.lightning_core.script_common import ScriptError, add_flags, nested_from_namespace, short_error

READY_MARKER = ".data_ready"
SPLIT_FILES = {"train": "training.jsonl", "validation": "validation.jsonl", "test": "test.jsonl"}
PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")
SPLIT_SEED = 42
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")


@dataclass
class CheckedHFDatasetConfig(HFDatasetConfig):
    """:class:`~mlrecipe_scripts.core.dataset_config.HFDatasetConfig` whose split ratios are checked when it is made
    (ValueError naming the flag)."""

    def __post_init__(self) -> None:
        if not 0 < self.train_split_ratio < 1:
            raise ValueError(f"--hfdc_train_split_ratio={self.train_split_ratio}: must be between 0 and 1 "
                             "(exclusive)")
        if not 0 <= self.val_test_split_ratio <= 1:
            raise ValueError(f"--hfdc_val_test_split_ratio={self.val_test_split_ratio}: must be between 0 and 1")


def split_percentages(config: Any) -> tuple[int, int, int]:
    """(train, val, test) whole percentages as the reference names the directory."""
    train = int(config.train_split_ratio * 100)
    val = int((100 - train) * (1 - config.val_test_split_ratio))
    return train, val, 100 - train - val


def default_data_dir(config: Any, home: Path | None = None) -> Path:
    """``$HOME/datasets/<name with / -> _>/<config or default>/train=T%-val=V%-test=S%``."""
    train, val, test = split_percentages(config)
    return (home or Path.home()) / "datasets" / config.dataset_name.replace("/", "_") / \
        (config.dataset_config or "default") / f"train={train}%-val={val}%-test={test}%"


def template_fields(config: Any) -> set[str]:
    """The ``{placeholder}`` names used by the two templates."""
    return set(PLACEHOLDER_RE.findall(config.input_template)) | set(PLACEHOLDER_RE.findall(config.output_template))


def load_split(config: Any) -> Any:
    """``config.split`` of the dataset (a hub id or a local directory) as a ``datasets.Dataset``."""
    flag = f"--hfdc_dataset_name={config.dataset_name}"
    try:
        import datasets
    except ImportError as exc:
        raise ScriptError(f"{flag}: preparing data needs the 'datasets' package (or pre-populate --data_dir)") from exc
    local = Path(config.dataset_name).expanduser()
    if local.exists() and not local.is_dir():
        raise ScriptError(f"{flag}: a file is not a dataset; put it in a directory and pass the directory")
    kwargs = dict(config.load_kwargs)
    if getattr(config, "cache_dir", None):  # pytorch_lightning's --hfdc_cache_dir (nemo2 has none)
        kwargs["cache_dir"] = config.cache_dir
    if local.is_dir():
        files = [p for p in local.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES]
        if not files:
            raise ScriptError(f"{flag}: the directory holds no .jsonl/.json/.csv/.parquet file")
        if all(p.stat().st_size == 0 for p in files):
            raise ScriptError(f"{flag}: the dataset is empty (all its files are empty)")
    elif config.dataset_name.startswith(("/", ".", "~")):
        raise ScriptError(f"{flag}: no such directory")
    elif config.num_proc and config.num_proc > 1:
        kwargs.setdefault("num_proc", config.num_proc)
    try:
        loaded = datasets.load_dataset(str(local) if local.is_dir() else config.dataset_name, config.dataset_config,
                                       **kwargs)
    except Exception as exc:
        hint = "" if local.is_dir() or os.environ.get("HF_DATASETS_OFFLINE", "1") in ("0", "false", "False") else \
            " (downloads are off: pass a local directory, pre-populate --data_dir, or set HF_DATASETS_OFFLINE=0 " \
            "HF_HUB_OFFLINE=0)"
        raise ScriptError(f"{flag}: cannot load it ({short_error(exc)}){hint}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        if config.split not in loaded:
            raise ScriptError(f"--hfdc_split={config.split}: the dataset has splits {sorted(loaded)}")
        loaded = loaded[config.split]
    if len(loaded) == 0:
        raise ScriptError(f"{flag}: split '{config.split}' has no rows")
    return loaded


def split_dataset(rows: Any, config: Any) -> dict[str, Any]:
    """train / validation / test like the reference: ``train_test_split(1 - train_split_ratio, seed=42)``, then the
    held-out part split again with ``val_test_split_ratio`` as the **test** share. A ratio of 0 puts all of the
    held-out rows in validation, 1 all of them in test (the reference has no such guard)."""
    try:
        first = rows.train_test_split(test_size=1.0 - config.train_split_ratio, seed=SPLIT_SEED)
        held = first["test"]
        if config.val_test_split_ratio <= 0:
            val, test = held, held.select([])
        elif config.val_test_split_ratio >= 1:
            val, test = held.select([]), held
        else:
            second = held.train_test_split(test_size=config.val_test_split_ratio, seed=SPLIT_SEED)
            val, test = second["train"], second["test"]
    except ValueError as exc:
        raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: {len(rows)} rows are too few for "
                          f"--hfdc_train_split_ratio={config.train_split_ratio} / --hfdc_val_test_split_ratio="
                          f"{config.val_test_split_ratio} ({short_error(exc)})") from exc
    return {"train": first["train"], "validation": val, "test": test}


def fine_tune_parser(description: str, config_cls: type, nested: str, dataset_cls: type) -> argparse.ArgumentParser:
    """The fine-tuning scripts' parser (family D1): a ``--<field>`` per field of ``config_cls`` but ``nested``, then
    the ``--hfdc_*`` group of ``dataset_cls`` (an :class:`CheckedHFDatasetConfig`)."""
    parser = argparse.ArgumentParser(description=description)
    add_flags(parser, config_cls, skip=(nested,))
    group = parser.add_argument_group("--hfdc_* (HFDatasetConfig; any of them rebuilds it from the class defaults, so "
                                      "--hfdc_dataset_name is then required)")
    add_flags(group, dataset_cls, skip=HFDC_NOT_ON_CLI, prefix="hfdc_", none_defaults=True)
    return parser


def fine_tune_values(ns: argparse.Namespace, parser: argparse.ArgumentParser, nested: str,
                     dataset_cls: type) -> dict[str, Any]:
    """The parsed flags as the config's keyword arguments; the ``--hfdc_*`` flags, when any is given, rebuilt into a
    ``dataset_cls`` under ``nested``."""
    values = {k: v for k, v in vars(ns).items() if not k.startswith("hfdc_")}
    dataset = nested_from_namespace(ns, parser, dataset_cls, "hfdc_", HFDC_NOT_ON_CLI)
    if dataset is not None:
        values[nested] = dataset
    return values
