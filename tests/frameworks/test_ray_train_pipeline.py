"""The raytrain recipes' scripts (``framework: ray_train``) run for real on CPU with a tiny model and local data.

``cd <scripts>`` then ``python text/cpt_ray_train.py ...``: the script starts a private local Ray (2 CPUs, no
dashboard), runs 2 Ray Train workers with gloo, and stops Ray again. Bad input and the checkpoint lookup are checked
without Ray. LoRA SFT -> convert (merged and ``--no_merge``) -> evaluate on a Ray cluster of the local backend is
``tests/integration/test_framework_examples.py``'s ray_train example test (Ray is slow to start on 2 cores: one
SFT run proves both).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from tests.frameworks import tiny
from tests.frameworks.helpers import (
    need_ml_stack,
    need_ray,
    ray_env,
    read_jsonl,
    run_python,
    wait_until_no_ray_processes,
)

pytestmark = pytest.mark.integration

MODEL_ID = "tiny/llama"  # like Qwen/Qwen3-14B: the Ray run is results/tiny-llama


# --------------------------------------------------------------------------------------------------------------
# bad input and checkpoint discovery (no Ray started)


def test_bad_input_gives_one_clear_line(ray_scripts: Path, tiny_model: Path, tmp_path: Path) -> None:
    need_ml_stack()
    home = tmp_path / "home"
    # an unknown flag: argparse's usage error, status 2 (the reference's test_checkpoint has no --lora_rank)
    run = run_python(ray_scripts, "shared/test_checkpoint.py", ["--base_model=tiny/llama", "--lora_rank=8"], home)
    assert run.returncode == 2 and run.last_error_line.endswith("unrecognized arguments: --lora_rank=8"), \
        run.describe()
    run = run_python(ray_scripts, "text/ray_train_sft.py", ["--trust_remote_code"], home)  # only CPT has it
    assert run.returncode == 2 and "unrecognized arguments: --trust_remote_code" in run.last_error_line

    # no checkpoint to convert: one "error:" line, status 1
    missing = tmp_path / "no-such-results"
    run = run_python(ray_scripts, "shared/convert_checkpoint_to_hf.py",
                     [f"--base_model={MODEL_ID}", f"--model_path={tiny_model}", f"--checkpoints_dir={missing}"], home)
    assert run.returncode == 1, run.describe()
    assert run.stderr.strip().splitlines() == [run.last_error_line]
    assert run.last_error_line.startswith(f"error: --checkpoints_dir={missing}: no such directory")
    (missing / "TorchTrainer_x").mkdir(parents=True)
    run = run_python(ray_scripts, "shared/test_checkpoint.py", [f"--checkpoints_dir={missing}"], home)
    assert run.returncode == 1 and run.last_error_line.startswith("error: --checkpoints_dir=") and \
        "no checkpoint_* directory" in run.last_error_line, run.describe()

    # a model directory that does not exist: refused before Ray starts
    run = run_python(ray_scripts, "text/ray_train_sft.py", [f"--model_path={tmp_path / 'nope'}"], home,
                     RAY_ADDRESS="")
    assert run.returncode == 1 and run.stderr.strip().splitlines() == [
        f"error: --model_path={tmp_path / 'nope'}: no such directory"], run.describe()
    assert "Ray" not in run.stdout
    empty = tmp_path / "empty-dataset"
    empty.mkdir()
    run = run_python(ray_scripts, "text/ray_train_sft.py", [f"--model_path={tiny_model}",
                                                           f"--hfdc_dataset_name={empty}"], home, RAY_ADDRESS="")
    assert run.returncode == 1 and run.stderr.strip().splitlines() == [
        f"error: --hfdc_dataset_name={empty}: the directory holds no non-empty .jsonl/.json/.csv/.parquet file"], \
        run.describe()


def test_newest_ray_checkpoint_rule(ray_scripts: Path, tmp_path: Path) -> None:
    """Newest ``TorchTrainer_*`` (v1 layout) by mtime, then newest ``checkpoint_*`` by mtime, then ``checkpoint/``."""
    common = importlib.import_module("mlrecipe_scripts.ray_train.common")

    def make(path: Path, mtime: float) -> Path:
        (path / "checkpoint").mkdir(parents=True)
        (path / "checkpoint" / "config.json").write_text("{}")
        os.utime(path, (mtime, mtime))
        return path

    v1 = tmp_path / "v1"
    make(v1 / "TorchTrainer_old" / "checkpoint_000009", 1000)
    os.utime(v1 / "TorchTrainer_old", (1000, 1000))
    make(v1 / "TorchTrainer_new" / "checkpoint_000000", 2000)
    make(v1 / "TorchTrainer_new" / "checkpoint_000001", 3000)
    make(v1 / "TorchTrainer_new" / "checkpoint_000002", 2500)
    os.utime(v1 / "TorchTrainer_new", (4000, 4000))
    assert common.latest_ray_checkpoint(v1) == v1 / "TorchTrainer_new" / "checkpoint_000001" / "checkpoint"

    v2 = tmp_path / "v2"  # later layouts: checkpoint_* directly under the run directory
    make(v2 / "checkpoint_000010", 1000)
    make(v2 / "checkpoint_000020", 2000)
    (v2 / "checkpoint_000020" / "checkpoint.hf_model").mkdir()  # a converted sibling is not a checkpoint
    assert common.latest_ray_checkpoint(v2) == v2 / "checkpoint_000020" / "checkpoint"


@pytest.mark.slow
def test_cpt_on_ray_from_a_prepared_data_dir(ray_scripts: Path, tiny_model: Path, ray_tmp: Path,
                                             tmp_path: Path) -> None:
    need_ray()
    home = tmp_path / "home"
    data_dir = tiny.make_prepared_cpt_dir(tmp_path / "fsx" / "cpt-data", n_train=64, n_val=8)
    metrics = tmp_path / "metrics.jsonl"
    run = run_python(ray_scripts, "text/cpt_ray_train.py", [
        f"--hf_model_id={MODEL_ID}", f"--model_path={tiny_model}", f"--data_dir={data_dir}", "--num_train_epochs=2",
        "--per_device_train_batch_size=4", "--gradient_accumulation_steps=1", "--warmup_steps=1",
        "--eval_steps=4", "--save_steps=4", "--logging_steps=2", "--learning_rate=3e-3", "--max_seq_length=64",
        "--num_workers=0"], home, timeout=420, **ray_env(ray_tmp, MLRECIPE_METRICS_FILE=str(metrics)))
    assert run.returncode == 0, run.describe()
    assert "nothing is loaded" in run.stdout
    assert not wait_until_no_ray_processes(ray_tmp)
    out = home / "results" / "tiny-llama-cpt"
    assert sorted(p.name for p in out.glob("checkpoint_*[0-9]")) == ["checkpoint_000012", "checkpoint_000016"]
    assert (out / "checkpoint_000016" / "checkpoint" / "model.safetensors").is_file()
    records = read_jsonl(metrics)
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    assert losses[-1] < losses[0] - 0.5, losses
