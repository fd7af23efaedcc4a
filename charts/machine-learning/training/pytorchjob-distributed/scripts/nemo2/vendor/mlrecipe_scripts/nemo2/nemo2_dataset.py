"""Text SFT data for the NeMo 2 fine-tuning: configuration, preparation into ``data_dir``, and the NeMo DataModule.

* :class:`HFDatasetConfig` (flags ``--hfdc_*``): which dataset to load (a hub id or a local directory of
  ``*.jsonl`` / ``*.json`` / ``*.csv`` / ``*.parquet``) and how a row becomes ``{"input": str, "output": str}``
  through two ``str.format`` templates (optionally through ``field_mapping``: a placeholder is filled from
  ``row[mapping.get(placeholder, placeholder)]``, a missing column gives ""; without a mapping a missing column is an
  error naming it). None values become "".
* :func:`prepare_dataset_files` writes ``training.jsonl``, ``validation.jsonl``, ``test.jsonl`` (the names NeMo's
  ``FineTuningDataModule`` reads) and the marker ``.data_ready`` into ``data_dir``: ``split`` is split
  ``train_split_ratio`` / rest, and the rest again with ``val_test_split_ratio`` as the *test* share (seed 42).
  Global rank 0 prepares; other ranks poll for the marker. When the marker exists nothing is loaded:
  pre-populating ``data_dir`` is the offline path. This part needs only ``datasets``, not NeMo.
* ``GeneralizedHFDataModule``: NeMo's ``FineTuningDataModule`` over the prepared ``data_dir``, with the Hugging Face
  tokenizer of ``hf_model_id`` (NeMo's ``AutoTokenizer``). It is created on first use, so importing this module
  does not import NeMo; it resolves by the import path
  ``mlrecipe_scripts.nemo2.nemo2_dataset.GeneralizedHFDataModule`` (nemo_run serializes a ``run.Config`` of it for
  the torchrun workers, which get the tree's root on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
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
from mlrecipe_scripts.nemo2.nemo2_common import ScriptError, log, poll_seconds, short_error, wait_for


@dataclass
class HFDatasetConfig(CheckedHFDatasetConfig):
    """Which dataset to load and how to convert its rows (flags ``--hfdc_<field>``); it travels to NeMo's workers
    as :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able fields (no ``custom_converter``): what a ``run.Config`` carries to the workers."""
        return {k: v for k, v in asdict(self).items() if k != "custom_converter"}

    @classmethod
    def from_value(cls, value: HFDatasetConfig | dict[str, Any]) -> HFDatasetConfig:
        """An instance from itself or from :meth:`to_dict` output."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            names = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in value.items() if k in names})
        raise TypeError(f"expected HFDatasetConfig or dict, got {type(value).__name__}")


def sft_default_config() -> HFDatasetConfig:
    """The script's default dataset (used when no ``--hfdc_*`` flag is given)."""
    return HFDatasetConfig.sft_default()


# --------------------------------------------------------------------------------------------------------------
# conversion and preparation


def convert_row(row: dict[str, Any], config: HFDatasetConfig) -> dict[str, str]:
    """One dataset row -> ``{"input", "output"}`` (see the module doc); a row that cannot be converted is an error."""
    if config.custom_converter is not None:
        out = config.custom_converter(row)
        if not isinstance(out, dict) or "input" not in out or "output" not in out:
            raise ScriptError("custom_converter must return a dict with 'input' and 'output'")
        return {"input": str(out["input"] or ""), "output": str(out["output"] or "")}
    if config.field_mapping is not None:
        values = {ph: row.get(config.field_mapping.get(ph, ph), "") for ph in template_fields(config)}
    else:
        values = dict(row)
    values = {k: "" if v is None else v for k, v in values.items()}
    try:
        return {"input": config.input_template.format(**values), "output": config.output_template.format(**values)}
    except KeyError as exc:
        raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: the templates use {{{exc.args[0]}}} but the "
                          f"rows have no such column (columns: {', '.join(sorted(row))}); map it with "
                          "--hfdc_field_mapping or change --hfdc_input_template / --hfdc_output_template") from None
    except (IndexError, ValueError) as exc:
        raise ScriptError(f"--hfdc_input_template / --hfdc_output_template: not a valid str.format template "
                          f"({short_error(exc)}; write literal braces as {{{{ and }}}})") from None


def build_dataset_files(config: HFDatasetConfig, data_dir: Path) -> dict[str, int]:
    """Load, split, convert and write the three files plus the marker (via a temporary sibling directory)."""
    start = time.monotonic()
    log(f"preparing dataset {config.dataset_name} ({config.dataset_config or 'default'}, split {config.split}) "
        f"into {data_dir}")
    parts = split_dataset(load_split(config), config)
    for split in ("train", "validation"):
        if len(parts[split]) == 0:
            raise ScriptError(f"--hfdc_dataset_name={config.dataset_name}: no {split} rows (use more rows or other "
                              "--hfdc_train_split_ratio / --hfdc_val_test_split_ratio)")
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = data_dir.parent / f".{data_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    counts: dict[str, int] = {}
    try:
        for split, fname in SPLIT_FILES.items():
            with open(tmp / fname, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(convert_row(row, config), ensure_ascii=False) + "\n" for row in parts[split])
            counts[split] = len(parts[split])
        if counts["test"] == 0:
            log("note: the test split is empty (test_checkpoint.py will need --test_path)")
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
                          poll: float | None = None, timeout: float | None = None) -> Path:
    """Make sure ``dataset_root`` holds the three jsonl files and ``.data_ready``; returns it.

    Global rank 0 prepares them unless the marker exists; other ranks poll for the marker (``data_dir`` must
    therefore be on storage that all nodes share).
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
    wait_for([marker], "the dataset", poll if poll is not None else poll_seconds(), timeout)
    return data_dir


# --------------------------------------------------------------------------------------------------------------
# NeMo DataModule (created on first use)


def _datamodule_class() -> type:
    """Build ``GeneralizedHFDataModule`` (imports NeMo)."""
    from nemo.collections.llm.gpt.data.fine_tuning import FineTuningDataModule

    class GeneralizedHFDataModule(FineTuningDataModule):
        """``FineTuningDataModule`` over ``dataset_root`` prepared from an :class:`HFDatasetConfig`.

        ``config`` is an :class:`HFDatasetConfig` or its :meth:`HFDatasetConfig.to_dict`; ``hf_model_id`` names the
        Hugging Face tokenizer (a local directory or a cached hub id) unless ``tokenizer`` is given; other keyword
        arguments go to ``FineTuningDataModule`` (``seq_length``, ``micro_batch_size``, ``global_batch_size``, ...).
        """

        def __init__(self, config: HFDatasetConfig | dict[str, Any], hf_model_id: str | None = None,
                     dataset_root: str | Path | None = None, tokenizer: Any = None, **kwargs: Any):
            if dataset_root is None:
                raise ValueError("GeneralizedHFDataModule: dataset_root is required")
            if tokenizer is None:
                if not hf_model_id:
                    raise ValueError("GeneralizedHFDataModule: pass hf_model_id (or a tokenizer)")
                from nemo.collections.common.tokenizers import AutoTokenizer

                tokenizer = AutoTokenizer(hf_model_id, use_fast=True)
            super().__init__(dataset_root=dataset_root, tokenizer=tokenizer, **kwargs)
            self.config = HFDatasetConfig.from_value(config)
            self.hf_model_id = hf_model_id

        def prepare_data(self) -> None:
            """Write the files and the marker on global rank 0 (other ranks wait), then NeMo's own preparation."""
            trainer = getattr(self, "trainer", None)
            prepare_dataset_files(self.config, self.dataset_root, trainer is None or trainer.is_global_zero)
            super().prepare_data()

    GeneralizedHFDataModule.__module__ = __name__
    GeneralizedHFDataModule.__qualname__ = "GeneralizedHFDataModule"
    return GeneralizedHFDataModule


_CLASSES: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    """``GeneralizedHFDataModule`` is created lazily, so that importing this module does not import NeMo."""
    if name == "GeneralizedHFDataModule":
        if name not in _CLASSES:
            _CLASSES[name] = _datamodule_class()
        return _CLASSES[name]
    raise AttributeError(name)
