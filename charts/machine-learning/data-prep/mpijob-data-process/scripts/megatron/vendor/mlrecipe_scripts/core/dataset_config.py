"""``--hfdc_*``: which Hugging Face dataset a text fine-tuning script loads and how it turns a row into
``{"input": str, "output": str}`` (two ``str.format`` templates, optionally through ``field_mapping``).

Every framework's ``HFDatasetConfig`` is this class (hf_trainer) or a subclass of it (lightning_core's checked one,
and the pytorch_lightning / nemo2 additions). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

ConfigT = TypeVar("ConfigT", bound="HFDatasetConfig")


@dataclass
class HFDatasetConfig:
    """Which dataset to load and how to convert its rows (flags ``--hfdc_<field>``).

    ``load_kwargs`` (passed to ``datasets.load_dataset``) and ``custom_converter`` (``row -> {"input", "output"}``)
    are not on the command line.
    """

    dataset_name: str
    dataset_config: str | None = None
    split: str = "train"
    train_split_ratio: float = 0.9
    val_test_split_ratio: float = 0.5
    input_template: str = "### Instruction:\n{instruction}\n ### Input:\n{input}\n"
    output_template: str = "### Response:\n{output}"
    field_mapping: dict | None = None
    num_proc: int = 8
    load_kwargs: dict = field(default_factory=dict)
    custom_converter: Callable[[dict], dict] | None = None

    @classmethod
    def sft_default(cls: type[ConfigT]) -> ConfigT:
        """The SFT scripts' default dataset (used when no ``--hfdc_*`` flag is given)."""
        return cls(
            dataset_name="cognitivecomputations/dolphin",
            dataset_config="flan1m-alpaca-uncensored",
            field_mapping={"instruction": "instruction", "input": "input", "output": "output"},
        )


HFDC_NOT_ON_CLI = ("load_kwargs", "custom_converter")
