"""validate refuses a Megatron training blend naming a shard its data step's --file-numbers never produce
(mlrecipe.spec.megatron_blend), at the argument's file and line, exit status 2, nothing started."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlrecipe.errors import SpecError
from mlrecipe.spec.load import load_pipeline
from mlrecipe.spec.megatron_blend import parse_file_numbers
from tests.repo import EXAMPLES

EXAMPLE = EXAMPLES / "frameworks" / "megatron"


def test_file_numbers_parse_like_the_data_step() -> None:
    assert parse_file_numbers("0-5") == frozenset(range(6))
    assert parse_file_numbers("0,3,7-9") == frozenset({0, 3, 7, 8, 9})
    assert parse_file_numbers("$SHARDS") is None and parse_file_numbers("5-2") is None


def test_the_example_blend_matches_its_data_step() -> None:
    spec = load_pipeline(EXAMPLE / "pipeline.yaml")
    assert [s.name for s in spec.steps] == ["corpus", "shards", "data", "pretrain", "evaluate", "export", "serve",
                                            "client"]


@pytest.mark.parametrize(("numbers", "missing"), [("0-2", "pile_03_text_document"),
                                                  ("0,2,3", "pile_01_text_document")])
def test_a_blend_naming_an_unprepared_shard_is_refused_at_its_line(tmp_path: Path, numbers: str,
                                                                    missing: str) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    data = tmp_path / "ex" / "data.yaml"
    data.write_text(data.read_text().replace("--file-numbers 0-3", f"--file-numbers {numbers}"))
    with pytest.raises(SpecError) as caught:
        load_pipeline(tmp_path / "ex" / "pipeline.yaml")
    (issue,) = caught.value.issues
    lines = (tmp_path / "ex" / "pretrain.yaml").read_text().splitlines()
    assert issue.file.endswith("pretrain.yaml") and "--data-path" in lines[issue.line - 1], issue
    assert issue.path == "train.args[0]"
    assert f"--data-path names {missing}" in issue.message and f"--file-numbers {numbers}" in issue.message


def test_another_output_prefix_is_refused_and_an_independent_step_is_not_checked(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    data = tmp_path / "ex" / "data.yaml"
    data.write_text(data.read_text().replace("--output-prefix pile", "--output-prefix web"))
    with pytest.raises(SpecError, match="pile_00_text_document"):
        load_pipeline(tmp_path / "ex" / "pipeline.yaml")
    pipeline = tmp_path / "ex" / "pipeline.yaml"
    text = pipeline.read_text().replace("    recipe: pretrain.yaml\n",
                                        "    recipe: pretrain.yaml\n    depends_on: []\n")
    pipeline.write_text(text.replace("    recipe: evaluate.yaml\n", "    recipe: evaluate.yaml\n"
                                     "    depends_on: [pretrain]\n")
                        .replace("    recipe: shards.yaml\n", "    recipe: shards.yaml\n    depends_on: [corpus]\n")
                        .replace("    recipe: data.yaml\n", "    recipe: data.yaml\n    depends_on: [shards]\n")
                        .replace("    recipe: corpus.yaml\n", "    recipe: corpus.yaml\n    depends_on: []\n"))
    assert load_pipeline(pipeline).step("pretrain").depends_on == ()  # not after the data step: not checked


@pytest.mark.integration
def test_validate_cli_exits_2_with_one_located_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    shutil.copytree(EXAMPLE, tmp_path / "ex")
    data = tmp_path / "ex" / "data.yaml"
    data.write_text(data.read_text().replace("--file-numbers 0-3", "--file-numbers 0-2"))
    done = subprocess.run([sys.executable, "-m", "mlrecipe", "validate", str(tmp_path / "ex" / "pipeline.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pretrain.yaml:33: train.args[0]: --data-path names pile_03_text_document" in errors[0]
