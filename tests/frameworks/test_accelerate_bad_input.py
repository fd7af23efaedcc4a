"""Bad input to the accelerate scripts: one ``error:`` line on stderr naming the flag or path, a non-zero exit,
and nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import Run, need_ml_stack, run_accelerate, run_python

pytestmark = pytest.mark.integration


def assert_error(run: Run, *needles: str) -> None:
    assert run.returncode == 1, run.describe()
    line = run.last_error_line
    assert line.startswith("error: "), run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


def offline_env(home: Path) -> dict[str, str]:
    return {"HF_HOME": str(home / ".cache" / "huggingface")}


@pytest.mark.parametrize("script", ["text/peft_accelerate.py", "text/cpt_accelerate.py",
                                    "shared/convert_checkpoint_to_hf.py", "shared/test_checkpoint.py"])
def test_model_path_that_is_not_a_model(scripts_dir: Path, tmp_path: Path, script: str) -> None:
    not_a_model = tmp_path / "models" / "empty"
    not_a_model.mkdir(parents=True)
    (not_a_model / "README.md").write_text("no weights here")
    run = run_python(scripts_dir, script, [f"--model_path={not_a_model}"], tmp_path / "home")
    assert_error(run, f"--model_path={not_a_model}", "not a model directory")
    run = run_python(scripts_dir, script, [f"--model_path={tmp_path / 'missing'}"], tmp_path / "home")
    assert_error(run, f"--model_path={tmp_path / 'missing'}", "no such directory")
    assert not (tmp_path / "home").exists()  # nothing prepared, nothing written


def test_hub_id_without_download(scripts_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = run_python(scripts_dir, "text/peft_accelerate.py", ["--hf_model_id=Qwen/Qwen3-14B"], home,
                     **offline_env(home))
    assert_error(run, "--hf_model_id=Qwen/Qwen3-14B", "not in the Hugging Face cache")
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py", ["--base_model=Qwen/Qwen3-14B"], home,
                     **offline_env(home))
    assert_error(run, "--base_model=Qwen/Qwen3-14B")


def test_broken_model_dir(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama"}))  # a config, no weights, no tokenizer
    data_dir = tiny.make_prepared_cpt_dir(tmp_path / "data", n_train=8, n_val=2)
    run = run_python(scripts_dir, "text/peft_accelerate.py", [f"--model_path={broken}", f"--data_dir={data_dir}",
                                                              "--output_dir=" + str(tmp_path / "out")],
                     tmp_path / "home")
    assert_error(run, str(broken))
    assert not (tmp_path / "out").exists()


def test_empty_dataset(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    need_ml_stack()
    empty = tmp_path / "empty-dataset"
    empty.mkdir()
    (empty / "data.jsonl").write_text("")
    home = tmp_path / "home"
    run = run_python(scripts_dir, "text/peft_accelerate.py",
                     [f"--model_path={tiny_model}", f"--hfdc_dataset_name={empty}"], home)
    assert_error(run, f"--hfdc_dataset_name={empty}", "empty")
    assert not list(home.rglob(".data_ready")) and not list(home.rglob("*.jsonl"))
    assert not (home / "results").exists()


def test_empty_dataset_under_accelerate_launch(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    """Rank 0 fails while rank 1 waits for the marker: the launcher stops both, the error line is in the log."""
    need_ml_stack()
    empty = tmp_path / "empty-dataset"
    empty.mkdir()
    (empty / "data.jsonl").write_text("")
    home = tmp_path / "home"
    run = run_accelerate(scripts_dir, "text/peft_accelerate.py",
                         [f"--model_path={tiny_model}", f"--hfdc_dataset_name={empty}"], home, timeout=180)
    assert run.returncode != 0, run.describe()
    assert f"error: --hfdc_dataset_name={empty}: the dataset is empty" in run.stderr, run.describe()
    assert not list(home.rglob(".data_ready"))


def test_prepared_data_dir_without_training_rows(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    need_ml_stack()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("training.jsonl", "validation.jsonl", "test.jsonl"):
        (data_dir / name).write_text("")
    (data_dir / ".data_ready").write_text("ready")
    run = run_python(scripts_dir, "text/cpt_accelerate.py", [f"--model_path={tiny_model}", f"--data_dir={data_dir}"],
                     tmp_path / "home")
    assert_error(run, str(data_dir / "training.jsonl"), "no training rows")


def test_nothing_to_convert(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     ["--base_model=tiny/llama", f"--model_path={tiny_model}"], home)
    assert_error(run, f"--checkpoints_dir={home / 'results' / 'tiny' / 'llama'}", "no such directory")
    results = home / "results" / "tiny" / "llama"
    (results / "checkpoint-3.hf_model").mkdir(parents=True)  # converted outputs are not checkpoints
    (results / "final").mkdir()
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     ["--base_model=tiny/llama", f"--model_path={tiny_model}"], home)
    assert_error(run, f"--checkpoints_dir={results}", "no checkpoint-<N>")
    (results / "checkpoint-5").mkdir()
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     ["--base_model=tiny/llama", f"--model_path={tiny_model}"], home)
    assert_error(run, str(results / "checkpoint-5"), "no weights")
    assert sorted(p.name for p in results.iterdir()) == ["checkpoint-3.hf_model", "checkpoint-5", "final"]


def test_lora_checkpoint_with_full_ft_flag(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    need_ml_stack()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "results" / "checkpoint-1"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(ckpt)
    run = run_python(scripts_dir, "shared/convert_checkpoint_to_hf.py",
                     [f"--model_path={tiny_model}", f"--checkpoints_dir={ckpt.parent}", "--full_ft"], tmp_path)
    assert_error(run, "--full_ft", "LoRA adapter")
    assert not (ckpt.parent / "checkpoint-1.hf_model").exists()


def test_evaluate_bad_test_sets(scripts_dir: Path, tmp_path: Path, tiny_model: Path) -> None:
    home = tmp_path / "home"
    (home / "results" / "tiny" / "llama" / "checkpoint-1").mkdir(parents=True)
    base = ["--base_model=tiny/llama", f"--model_path={tiny_model}"]
    run = run_python(scripts_dir, "shared/test_checkpoint.py", base, home)
    assert_error(run, str(home / "datasets"), "--test_path")
    empty = tmp_path / "test.jsonl"
    empty.write_text("\n")
    run = run_python(scripts_dir, "shared/test_checkpoint.py", [*base, f"--test_path={empty}"], home)
    assert_error(run, str(empty), "empty")
    run = run_python(scripts_dir, "shared/test_checkpoint.py", [*base, f"--test_path={tmp_path / 'nope.jsonl'}"],
                     home)
    assert_error(run, "--test_path=")
