"""Fixtures for the framework-script tests: the scripts copied the way the chart's init container copies them,
a tiny local model, local data, and a private Ray temp dir. The helpers they use live in ``helpers.py``.

In-process tests import the package (``mlrecipe_scripts.*``); subprocess runs use the chart's generated tree, whose
entry files import the tree's own copy of the package."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.frameworks import preference_data, tiny
from tests.frameworks.helpers import ACCELERATE_SCRIPTS, RAY_SCRIPTS, need_ml_stack


@pytest.fixture(scope="session")
def scripts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``scripts/accelerate`` (as the init container makes ``/etc/framework-scripts``)."""
    target = tmp_path_factory.mktemp("etc") / "framework-scripts"
    shutil.copytree(ACCELERATE_SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


@pytest.fixture(scope="module")
def ray_scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``scripts/ray_train`` (as the init container makes ``/etc/framework-scripts``)."""
    target = tmp_path_factory.mktemp("etc-ray") / "framework-scripts"
    shutil.copytree(RAY_SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ruff_cache"))
    return target


@pytest.fixture(scope="module")
def ray_tmp() -> Iterator[Path]:
    """A short, private Ray temp dir (Ray's socket paths must stay short); it names this module's Ray processes."""
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model directory: 2-layer Llama (hidden 64) + a BPE tokenizer trained here."""
    need_ml_stack()
    return tiny.make_model(tmp_path_factory.mktemp("pretrained-models") / "tiny-llama")


@pytest.fixture(scope="session")
def instruction_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local dataset directory (``data.jsonl``, 300 alpaca-style rows) usable as ``--hfdc_dataset_name``."""
    return tiny.make_instruction_dataset(tmp_path_factory.mktemp("datasets-src") / "instructions")


@pytest.fixture(scope="session")
def preference_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local dataset directory (``pairs.jsonl``, 120 prompt / chosen / rejected rows) for ``--rmdc_dataset_name``."""
    return preference_data.make_preference_dataset(tmp_path_factory.mktemp("datasets-src") / "preferences")
