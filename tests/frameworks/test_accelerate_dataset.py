"""``text/dataset_module.py``: row conversion, splits, preparation into data_dir (rank 0 / waiting ranks), datasets."""

from __future__ import annotations

import importlib
import json
import threading
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import need_ml_stack


@pytest.fixture(scope="module")
def dm(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.hf_trainer.text_dataset")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_convert_row_templates(dm: ModuleType) -> None:
    row = {"instruction": "Say hi", "input": "", "output": "hi"}
    cfg = dm.sft_default_config()
    assert dm.convert_row(row, cfg) == {"input": "### Instruction:\nSay hi\n ### Input:\n\n",
                                        "output": "### Response:\nhi"}
    mapped = dm.HFDatasetConfig(dataset_name="x", field_mapping={"instruction": "question", "output": "answer"})
    assert dm.convert_row({"question": "q?", "answer": "a"}, mapped) == {
        "input": "### Instruction:\nq?\n ### Input:\n\n", "output": "### Response:\na"}  # missing column -> ""
    with pytest.raises(dm.ScriptError, match="no column 'instruction'"):
        dm.convert_row({"text": "t"}, dm.HFDatasetConfig(dataset_name="x"))
    assert dm.convert_row({"text": "t"}, dm.cpt_default_config()) == {"input": "", "output": "t"}


@pytest.mark.parametrize("n, train, val_test, expected", [
    (100, 0.9, 0.5, (90, 5, 5)),
    (300, 0.9, 0.5, (270, 15, 15)),
    (100, 0.8, 0.25, (80, 15, 5)),
    (100, 0.9, 0.0, (90, 10, 0)),
    (100, 0.9, 1.0, (90, 0, 10)),
])
def test_split_sizes(dm: ModuleType, n: int, train: float, val_test: float, expected: tuple[int, int, int]) -> None:
    parts = dm.split_indices(n, train, val_test)
    assert (len(parts["train"]), len(parts["validation"]), len(parts["test"])) == expected
    assert sorted(parts["train"] + parts["validation"] + parts["test"]) == list(range(n))
    assert parts == dm.split_indices(n, train, val_test)  # seeded


def test_prepare_local_dir_then_reuse(dm: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    source = tiny.make_instruction_dataset(tmp_path / "src", n=60)
    cfg = dm.HFDatasetConfig(dataset_name=str(source))
    data_dir = dm.default_data_dir(cfg, tmp_path / "home")
    assert data_dir.name == "train=90%-val=5%-test=5%" and data_dir.parent.name == "default"
    dm.prepare_datasets(cfg, data_dir, rank=0)
    assert (data_dir / ".data_ready").read_text() == "ready"
    sizes = {name: len(lines(data_dir / name)) for name in ("training.jsonl", "validation.jsonl", "test.jsonl")}
    assert sizes == {"training.jsonl": 54, "validation.jsonl": 3, "test.jsonl": 3}
    row = lines(data_dir / "training.jsonl")[0]
    assert set(row) == {"input", "output"} and row["input"].startswith("### Instruction:\n")
    assert not [p for p in data_dir.parent.iterdir() if p.name.startswith(".")]  # no temp dir left
    # the marker short-circuits everything: a source that no longer exists is not touched
    gone = dm.HFDatasetConfig(dataset_name=str(tmp_path / "gone"))
    assert dm.prepare_datasets(gone, data_dir, rank=0) == data_dir


def test_other_ranks_wait_for_the_marker(dm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "shared-data"
    cfg = dm.HFDatasetConfig(dataset_name="never/loaded")
    done: list[float] = []
    waiting = threading.Event()
    log = dm.log

    def logs(message: str) -> None:
        if "waiting for rank 0" in message:
            waiting.set()
        log(message)

    monkeypatch.setattr(dm, "log", logs)
    waiter = threading.Thread(target=lambda: done.append(bool(dm.prepare_datasets(cfg, data_dir, rank=1,
                                                                                 poll_seconds=0.05))))
    waiter.start()
    assert waiting.wait(10), "rank 1 never said it waits for rank 0"
    assert not done, "rank 1 must wait for rank 0"  # it returns only once the marker exists
    tiny.make_prepared_cpt_dir(data_dir, n_train=4, n_val=1)
    waiter.join(timeout=5)
    assert done == [True]


def test_empty_and_bad_sources(dm: ModuleType, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "data.jsonl").write_text("")
    target = tmp_path / "out"
    with pytest.raises(dm.ScriptError, match="empty"):
        dm.prepare_datasets(dm.HFDatasetConfig(dataset_name=str(empty)), target, rank=0)
    with pytest.raises(dm.ScriptError, match="a file is not a dataset"):
        dm.prepare_datasets(dm.HFDatasetConfig(dataset_name=str(empty / "data.jsonl")), target, rank=0)
    with pytest.raises(dm.ScriptError, match="--hfdc_train_split_ratio"):
        dm.prepare_datasets(dm.HFDatasetConfig(dataset_name=str(empty), train_split_ratio=1.0), target, rank=0)
    assert not target.exists() and not list(tmp_path.glob(".out*"))


def test_sft_and_cpt_tokenization(dm: ModuleType, tiny_model: Path, tmp_path: Path) -> None:
    need_ml_stack()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    path = tiny.write_jsonl(tmp_path / "training.jsonl", [
        {"input": "### Instruction:\nRepeat the color twice.\n", "output": "### Response:\nred red"}])
    sft = dm.SFTDataset(path, tok, max_seq_length=128)[0]
    n_prompt = len(tok("### Instruction:\nRepeat the color twice.\n")["input_ids"])
    assert sft["input_ids"] == tok("### Instruction:\nRepeat the color twice.\n### Response:\nred red")["input_ids"]
    assert sft["labels"][:n_prompt] == [-100] * n_prompt
    assert sft["labels"][n_prompt:] == sft["input_ids"][n_prompt:] and len(sft["labels"]) > n_prompt
    cpt = dm.CPTDataset(path, tok, max_seq_length=5)[0]
    assert len(cpt["input_ids"]) == 5 and cpt["labels"] == cpt["input_ids"]
    batch = dm.make_collator(tok)([sft, dm.SFTDataset(path, tok, max_seq_length=6)[0]])
    assert batch["input_ids"].shape[1] % 8 == 0
    assert int((batch["labels"][1] == -100).sum()) == batch["labels"].shape[1]  # prompt fills the 6 tokens
