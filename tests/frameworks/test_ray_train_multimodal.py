"""The ray_train vision-language scripts (``multimodal/vision_language/ray_train_vlm.py``, ``cpt_ray_train_vlm.py``),
run as the reference recipes run them (``cd <scripts> && python multimodal/vision_language/<script> ...``) on a copy
of ``scripts/ray_train`` made the way the chart materializes it (the symlinks into ``scripts/accelerate`` become
files), with the tiny Qwen3-VL of ``tiny_vlm.py`` and generated images.

* a reference-style argument list parses to the reference defaults (``--results_dir`` instead of ``--output_dir``);
* bad input (unknown flag, missing data dir, missing image, a model that is not a VLM) ends with one ``error:`` line
  before Ray starts;
* slow: LoRA SFT and CPT on a private local Ray with 2 CPU workers (gloo): the loss falls, Ray checkpoints land where
  the ray_train convert / evaluate scripts look (``<run>/checkpoint_<step>/checkpoint/``), and they load back (the
  adapter onto the base model, the CPT model as a whole) with the processor.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks import tiny_vlm
from tests.frameworks.helpers import (
    Run,
    assert_error,
    need_ml_stack,
    need_ray,
    ray_env,
    read_jsonl,
    run_python,
    script_env,
    wait_until_no_ray_processes,
)

pytestmark = pytest.mark.integration

VL = "multimodal/vision_language"
MODEL_ID = "tiny/qwen3-vl"  # Ray runs: results/tiny-qwen3-vl-vlm-sft and -vlm-cpt
LORA_ARGS = ["--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0"]


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-VL model directory."""
    need_ml_stack()
    pytest.importorskip("PIL")
    return tiny_vlm.make_vlm(tmp_path_factory.mktemp("pretrained-models") / "tiny-qwen3-vl")


def test_the_tree_is_materialized(ray_scripts: Path) -> None:
    shipped = [f"{VL}/{name}" for name in ("ray_train_vlm.py", "cpt_ray_train_vlm.py", "test_adapters.py")] + [
        f"vendor/mlrecipe_scripts/hf_trainer/vision_language/{name}" for name in (
            "vlm_dataset.py", "adapters/registry.py", "adapters/qwen_vl_adapter.py", "base/base_dataset.py")]
    for name in shipped:
        assert (ray_scripts / name).is_file() and not (ray_scripts / name).is_symlink(), name


PARSE = """
import json, sys
from mlrecipe_scripts.ray_train.vision_language import cpt_ray_train_vlm, ray_train_vlm
from mlrecipe_scripts.hf_trainer.vision_language import training_common
from mlrecipe_scripts.ray_train.common import results_root, run_name
reference = json.loads(sys.argv[1])
sft, cpt = ray_train_vlm.parse_args(reference), cpt_ray_train_vlm.parse_args([])
print(json.dumps({
    "sft": vars(sft), "cpt": vars(cpt),
    "sft_data": str(training_common.resolve_data_dir(sft, training_common.SFT)),
    "cpt_data": str(training_common.resolve_data_dir(cpt, training_common.CPT)),
    "results": str(results_root(sft.results_dir)),
    "runs": [run_name(sft.model_id) + ray_train_vlm.SPEC.run_suffix,
             run_name(cpt.model_id) + cpt_ray_train_vlm.SPEC.run_suffix],
}))
"""


def test_a_reference_style_argument_list_parses(ray_scripts: Path, tmp_path: Path) -> None:
    reference = ["--model_id=Qwen/Qwen3-VL-8B-Instruct", "--model_path=/fsx/models/Qwen/Qwen3-VL-8B-Instruct",
                 "--hf_dataset_name=lmms-lab/LLaVA-NeXT-Data", "--hf_max_samples=10000", "--max_steps=2000",
                 "--per_device_train_batch_size=1", "--gradient_accumulation_steps=8", "--learning_rate=1e-4",
                 "--lora_rank=32", "--lora_on_vision", "--no_freeze_vision_encoder", "--save_steps=200",
                 "--eval_steps=200", "--max_eval_samples=64", "--num_workers=2", "--use_wandb"]
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-c", PARSE, json.dumps(reference)], cwd=ray_scripts / "vendor",
                          env=script_env(home), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    sft, cpt = out["sft"], out["cpt"]
    assert (sft["model_id"], sft["hf_dataset_name"], sft["hf_max_samples"], sft["max_steps"]) == \
        ("Qwen/Qwen3-VL-8B-Instruct", "lmms-lab/LLaVA-NeXT-Data", 10000, 2000)
    assert (sft["lora_rank"], sft["lora_alpha"], sft["lora_on_vision"], sft["freeze_vision_encoder"]) == \
        (32, 16, True, False)
    assert (sft["save_steps"], sft["eval_steps"], sft["max_eval_samples"], sft["use_wandb"]) == (200, 200, 64, True)
    # omitted flags keep the reference defaults
    assert (sft["save_total_limit"], sft["results_dir"], sft["warmup_steps"], sft["max_seq_length"]) == \
        (2, "results", 100, 8192)
    assert (sft["ray_num_workers"], sft["ray_cpus_per_worker"], sft["full_ft"]) == (None, None, False)
    assert "output_dir" not in sft and "lora_rank" not in cpt
    assert (cpt["freeze_vision_encoder"], cpt["num_train_epochs"], cpt["warmup_steps"], cpt["max_seq_length"],
            cpt["save_steps"], cpt["eval_steps"], cpt["hf_train_split_ratio"]) == (False, 3, 1000, 4096, 1000, 1000,
                                                                                  0.99)
    assert out["sft_data"] == str(home / "datasets" / "lmms-lab_LLaVA-NeXT-Data" / "default" /
                                  "train=90%-val=5%-test=5%")
    assert out["cpt_data"] == str(home / "datasets" / "visual_cpt")
    assert out["results"] == str(home / "results")
    assert out["runs"] == ["Qwen-Qwen3-VL-8B-Instruct-vlm-sft", "Qwen-Qwen3-VL-8B-Instruct-vlm-cpt"]


def assert_refused(run: Run, *needles: str, status: int = 1) -> None:
    """One ``error:`` line with ``needles``, status ``status``, and no Ray started."""
    assert_error(run, *needles, status=status)
    assert "Ray" not in run.stdout, run.describe()


@pytest.mark.parametrize("script", ["ray_train_vlm.py", "cpt_ray_train_vlm.py"])
def test_bad_input_gives_one_error_line_before_ray(ray_scripts: Path, vlm: Path, tmp_path: Path, script: str) -> None:
    home = tmp_path / "home"
    path = f"{VL}/{script}"
    assert_refused(run_python(ray_scripts, path, ["--output_dir=/x"], home), "unrecognized arguments: --output_dir=/x",
                   status=2)
    assert_refused(run_python(ray_scripts, path, [f"--model_path={vlm}", f"--data_dir={tmp_path / 'nope'}"], home,
                                  RAY_ADDRESS=""), f"--data_dir={tmp_path / 'nope'}", "no such directory")
    text_model = tmp_path / "models" / "llama"
    text_model.mkdir(parents=True)
    (text_model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert_refused(run_python(ray_scripts, path, [f"--model_path={text_model}"], home),
                   "no vision-language adapter", "model_type 'llama'")
    data_dir = tiny_vlm.write_data_dir(tmp_path / "data", n_train=3, n_val=1, n_test=1, text_only=0)
    missing = data_dir / read_jsonl(data_dir / "training.jsonl")[1]["image"]
    missing.unlink()
    assert_refused(run_python(ray_scripts, path, [f"--model_path={vlm}", f"--data_dir={data_dir}"], home,
                                  RAY_ADDRESS=""),
                   f"{data_dir / 'training.jsonl'}:2", f"image file {missing} not found")
    assert not (home / "results").exists()


# ------------------------------------------------------------------------------------------------ real Ray runs


@dataclass
class Release:
    home: Path
    run: Run
    metrics: Path

    def ray_run(self, suffix: str) -> Path:
        return self.home / "results" / f"tiny-qwen3-vl-{suffix}"


def losses(metrics: Path, key: str = "loss") -> list[float]:
    return [r["metrics"][key] for r in read_jsonl(metrics) if key in r.get("metrics", {})]


@pytest.fixture(scope="module")
def sft(ray_scripts: Path, vlm: Path, ray_tmp: Path, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """LoRA SFT on 2 Ray Train CPU workers: 12 steps, eval every 4, data prepared from a local image dataset."""
    need_ray()
    source = tmp_path_factory.mktemp("datasets-src") / "colour-squares"
    tiny_vlm.write_jsonl(source / "data.jsonl", tiny_vlm.make_color_rows(source / "images", 30, seed=5, rel_to=source,
                                                                           text_only=2))
    home = tmp_path_factory.mktemp("efs-home-ray-vlm")
    metrics = home / "metrics.jsonl"
    run = run_python(ray_scripts, f"{VL}/ray_train_vlm.py", [
        f"--model_id={MODEL_ID}", f"--model_path={vlm}", f"--hf_dataset_name={source}", "--hf_train_split_ratio=0.8",
        "--max_steps=12", "--per_device_train_batch_size=2", "--per_device_eval_batch_size=2",
        "--gradient_accumulation_steps=1", "--eval_steps=4", "--logging_steps=2", "--learning_rate=5e-3",
        "--warmup_steps=1", "--max_seq_length=256", "--num_workers=0", *LORA_ARGS,
    ], home, timeout=300, **ray_env(ray_tmp, MLRECIPE_METRICS_FILE=str(metrics)))
    assert run.returncode == 0, run.describe()
    assert not wait_until_no_ray_processes(ray_tmp)
    return Release(home, run, metrics)


@pytest.mark.slow
def test_sft_on_ray_learns_and_writes_ray_checkpoints(sft: Release, ray_scripts: Path) -> None:
    out = sft.run.stdout
    assert "started a local Ray" in out and "2 CPU worker(s), 1 CPU each, backend gloo" in out
    assert "qwen-vl adapter" in out and "weights float32" in out
    [ready] = list((sft.home / "datasets").rglob(".data_ready"))
    assert ready.parent.name == "train=80%-val=10%-test=10%"

    train, evals = losses(sft.metrics), losses(sft.metrics, "eval_loss")
    assert len(train) == 6 and len(evals) == 3, read_jsonl(sft.metrics)
    assert train[-1] < train[0] - 0.5 and evals[-1] < evals[0], (train, evals)  # it learns

    run = sft.ray_run("vlm-sft")
    ckpts = sorted(p.name for p in run.glob("checkpoint_*[0-9]"))
    assert 1 <= len(ckpts) <= 2 and ckpts[-1] == f"checkpoint_{4 * (evals.index(min(evals)) + 1):06d}", ckpts
    common = importlib.import_module("mlrecipe_scripts.ray_train.common")
    hf = common.latest_ray_checkpoint(run)  # the lookup of shared/convert_checkpoint_to_hf.py and test_checkpoint.py
    assert hf == run / ckpts[-1] / "checkpoint"
    for name in ("adapter_model.safetensors", "adapter_config.json", "processor_config.json", "tokenizer.json",
                 "chat_template.jinja", "rng_state_0.pth", "rng_state_1.pth"):
        assert (hf / name).is_file(), name
    assert f"newest checkpoint {hf.parent}" in out and "train loss " in out


@pytest.mark.slow
def test_the_ray_checkpoint_loads_onto_the_base_model(sft: Release, vlm: Path, ray_scripts: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import Qwen3VLForConditionalGeneration

    common = importlib.import_module("mlrecipe_scripts.ray_train.common")
    hf = common.latest_ray_checkpoint(sft.ray_run("vlm-sft"))
    processor = tiny_vlm.load_processor(hf)
    assert processor.tokenizer.get_vocab() == tiny_vlm.load_processor(vlm).tokenizer.get_vocab()
    base = Qwen3VLForConditionalGeneration.from_pretrained(vlm, dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, hf).eval()
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)  # trained (lora_B starts at zero)
    assert all("visual" not in n for n, _ in model.named_parameters() if "lora_" in n)
    merged = model.merge_and_unload()
    inputs = processor(text=["<|im_start|>user\nSay hello.<|im_end|>\n"], return_tensors="pt")
    with torch.no_grad():
        assert merged(**inputs).logits.isfinite().all()


@pytest.mark.slow
def test_the_converter_merges_the_vision_language_adapter(sft: Release, vlm: Path, ray_scripts: Path) -> None:
    """``shared/convert_checkpoint_to_hf.py`` finds the newest Ray checkpoint, loads the VLM (not a causal LM),
    merges the adapter and writes a model that reloads with its processor."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    run = run_python(ray_scripts, "shared/convert_checkpoint_to_hf.py",
                     [f"--model_path={vlm}", f"--checkpoints_dir={sft.ray_run('vlm-sft')}"], sft.home, timeout=240)
    assert run.returncode == 0, run.describe()
    [out] = list(sft.ray_run("vlm-sft").glob("checkpoint_*/checkpoint.hf_model"))
    assert "wrote the merged model" in run.stdout and (out / "processor_config.json").is_file()
    merged = Qwen3VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    base = Qwen3VLForConditionalGeneration.from_pretrained(vlm, dtype=torch.float32).eval()
    changed = [n for n, p in merged.named_parameters() if not torch.equal(p, base.get_parameter(n))]
    assert changed and all("visual" not in n for n in changed), changed[:5]  # LoRA merged into the language model
    processor = tiny_vlm.load_processor(out)
    inputs = processor(text=["<|im_start|>user\nSay hello.<|im_end|>\n"], return_tensors="pt")
    with torch.no_grad():
        assert merged(**inputs).logits.isfinite().all()


@pytest.mark.slow
def test_cpt_on_ray_trains_the_whole_model(ray_scripts: Path, vlm: Path, ray_tmp: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    need_ray()
    home = tmp_path / "home"
    data_dir = tiny_vlm.write_data_dir(tmp_path / "visual-cpt", n_train=14, n_val=2, n_test=2, text_only=2)
    run = run_python(ray_scripts, f"{VL}/cpt_ray_train_vlm.py", [
        f"--model_id={MODEL_ID}", f"--model_path={vlm}", f"--data_dir={data_dir}", "--num_train_epochs=1",
        "--per_device_train_batch_size=2", "--gradient_accumulation_steps=1", "--save_steps=2", "--eval_steps=2",
        "--logging_steps=1", "--learning_rate=1e-3", "--warmup_steps=1", "--max_seq_length=256", "--num_workers=0",
    ], home, timeout=300, **ray_env(ray_tmp))
    assert run.returncode == 0, run.describe()
    assert not wait_until_no_ray_processes(ray_tmp)
    out = home / "results" / "tiny-qwen3-vl-vlm-cpt"
    # 16 rows / (2 workers x 2) = 4 steps, a checkpoint every 2nd
    assert sorted(p.name for p in out.glob("checkpoint_*[0-9]")) == ["checkpoint_000002", "checkpoint_000004"]
    hf = out / "checkpoint_000004" / "checkpoint"
    assert (hf / "config.json").is_file() and (hf / "processor_config.json").is_file()
    before, after = load_file(vlm / "model.safetensors"), load_file(hf / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {k for k in before if not bool((before[k] == after[k]).all())}
    assert any("visual" in k for k in changed) and any("language_model" in k for k in changed)
