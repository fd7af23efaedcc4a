"""The accelerate vision-language scripts (``multimodal/vision_language/``), run for real on CPU with a tiny Qwen3-VL
built from a config, a processor made here, and generated images, as the recipes run them:
``cd <scripts> && accelerate launch --multi_gpu --num_processes 2 multimodal/vision_language/<script> ...``.

* LoRA SFT prepares a local image dataset (``--hf_dataset_name=<dir>``), learns (loss down), writes the reference
  layout (``checkpoint-<step>`` at improving evals, ``final/`` adapter + processor, ``logs/``) and the adapter
  reloads onto the base model and carries what was learnt;
* continual pre-training trains all parameters (vision tower included) for a few steps, with text-only rows;
* bad input (unknown flag, a model dir that is not a (vision-language) model, a missing image) ends with one
  ``error:`` line naming the flag or path and a non-zero status, before any model is loaded;
* the flags keep the reference defaults; ``--list_models`` and ``test_adapters.py`` work without torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.frameworks import tiny_vlm
from tests.frameworks.helpers import Run, assert_error, need_ml_stack, run_accelerate, run_python, script_env

pytestmark = pytest.mark.integration

MODEL_ID = "tiny/qwen3-vl"  # like Qwen/Qwen3-VL-8B-Instruct: results/<org>/<name>
VL = "multimodal/vision_language"
LORA_ARGS = ["--lora_rank=8", "--lora_alpha=16", "--lora_dropout=0.0"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-VL model directory."""
    need_ml_stack()
    pytest.importorskip("PIL")
    return tiny_vlm.make_vlm(tmp_path_factory.mktemp("pretrained-models") / "tiny-qwen3-vl")


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local dataset directory: ``data.jsonl`` (60 image rows with paths relative to it, 2 rows without an image)
    and ``images/``."""
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("datasets-src") / "colour-squares"
    tiny_vlm.write_jsonl(root / "data.jsonl", tiny_vlm.make_color_rows(root / "images", 60, seed=5, rel_to=root,
                                                                         text_only=2))
    return root


@dataclass
class Release:
    home: Path
    run: Run
    metrics: Path

    @property
    def results(self) -> Path:
        return self.home / "results" / "tiny" / "qwen3-vl"


@pytest.fixture(scope="module")
def sft(scripts_dir: Path, vlm: Path, image_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """LoRA SFT, 2 processes, 40 steps, eval every 10, the dataset prepared from the local directory."""
    home = tmp_path_factory.mktemp("efs-home-vlm-sft")
    metrics = home / "metrics.jsonl"
    run = run_accelerate(scripts_dir, f"{VL}/peft_accelerate.py", [
        f"--model_id={MODEL_ID}", f"--model_path={vlm}", f"--hf_dataset_name={image_dataset}",
        "--hf_train_split_ratio=0.8", "--max_steps=40", "--per_device_train_batch_size=2",
        "--per_device_eval_batch_size=4", "--gradient_accumulation_steps=1", "--eval_steps=10", "--logging_steps=5",
        "--learning_rate=5e-3", "--warmup_steps=2", "--max_seq_length=256", "--num_workers=0", *LORA_ARGS,
    ], home, timeout=240, MLRECIPE_METRICS_FILE=str(metrics))
    assert run.returncode == 0, run.describe()
    return Release(home, run, metrics)


@pytest.mark.slow
def test_sft_prepares_learns_and_writes_the_reference_layout(sft: Release, image_dataset: Path) -> None:
    # data: $HOME/datasets/<name / -> _>/default/train=80%-val=10%-test=10%, rows without an image dropped
    data_dir = sft.home / "datasets" / str(image_dataset).replace("/", "_") / "default" / "train=80%-val=10%-test=10%"
    assert (data_dir / ".data_ready").read_text() == "ready"
    splits = [read_jsonl(data_dir / f) for f in ("training.jsonl", "validation.jsonl", "test.jsonl")]
    counts = [len(s) for s in splits]  # 62 rows split 49 / 6 / 7, then the 2 without an image dropped
    assert sum(counts) == 60 and all(c <= limit for c, limit in zip(counts, (49, 6, 7), strict=True)), counts
    rows = [r for s in splits for r in s]
    assert all(Path(r["image"]).is_absolute() and Path(r["image"]).is_file() for r in rows)
    assert all([t["from"] for t in r["conversations"]] == ["human", "gpt"] for r in rows)

    records = read_jsonl(sft.metrics)
    losses = [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]
    evals = [r["metrics"]["eval_loss"] for r in records if "eval_loss" in r.get("metrics", {})]
    assert len(losses) == 8 and len(evals) == 4, records
    assert losses[-1] < losses[0] - 0.5, losses  # it learns
    assert evals[-1] < evals[0] - 0.3, evals

    results = sft.results
    steps = sorted(int(p.name.split("-")[1]) for p in results.glob("checkpoint-*"))
    best_step = 10 * (evals.index(min(evals)) + 1)
    assert 1 <= len(steps) <= 2 and steps[-1] == best_step, (steps, evals)  # saved at improving evals only
    ckpt = results / f"checkpoint-{steps[-1]}"
    for name in ("adapter_model.safetensors", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth",
                 "processor_config.json", "tokenizer.json"):
        assert (ckpt / name).is_file(), name
    final = results / "final"
    for name in ("adapter_model.safetensors", "adapter_config.json", "processor_config.json", "tokenizer.json",
                 "chat_template.jinja"):
        assert (final / name).is_file(), name
    assert not (final / "model.safetensors").exists()  # LoRA: the adapter only
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["task_type"] == "CAUSAL_LM" and "visual" in config["target_modules"]
    assert list((results / "logs").glob("events.out.tfevents.*"))
    out = sft.run.stdout
    assert "qwen-vl adapter" in out and "weights float32" in out and "attention sdpa" in out
    assert "vision encoder frozen" in out


def answer_loss(model: object, processor: object, row: dict) -> float:
    """Cross-entropy of the answer tokens of one row (the prompt masked)."""
    import torch
    from PIL import Image

    image = Image.open(row["image"]).convert("RGB")
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text",
                                                            "text": row["conversations"][0]["value"][8:]}]}
    answer = {"role": "assistant", "content": [{"type": "text", "text": row["conversations"][1]["value"]}]}
    prompt = processor.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
    full = processor.apply_chat_template([user, answer], tokenize=False)
    inputs = processor(text=[full], images=[image], return_tensors="pt")
    n_prompt = processor(text=[prompt], images=[image], return_tensors="pt")["input_ids"].shape[1]
    labels = inputs["input_ids"].clone()
    labels[:, :n_prompt] = -100
    with torch.no_grad():
        return float(model(**inputs, labels=labels).loss)


@pytest.mark.slow
def test_saved_adapter_reloads_and_carries_the_learning(sft: Release, vlm: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import Qwen3VLForConditionalGeneration

    final = sft.results / "final"
    processor = tiny_vlm.load_processor(final)  # the processor saved with the adapter loads and matches the source
    source = tiny_vlm.load_processor(vlm)
    assert processor.tokenizer.get_vocab() == source.tokenizer.get_vocab()
    assert processor.chat_template == source.chat_template

    base = Qwen3VLForConditionalGeneration.from_pretrained(vlm, dtype=torch.float32).eval()
    [data_dir] = [p.parent for p in (sft.home / "datasets").rglob(".data_ready")]
    val = read_jsonl(data_dir / "validation.jsonl")
    before = sum(answer_loss(base, processor, r) for r in val) / len(val)
    model = PeftModel.from_pretrained(base, final).eval()
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all("visual" not in n for n, _ in model.named_parameters() if "lora_" in n)
    assert any(float(p.abs().max()) > 0 for p in lora_b)  # trained (lora_B starts at zero)
    after = sum(answer_loss(model, processor, r) for r in val) / len(val)
    assert after < before - 0.3, (before, after)


@pytest.mark.slow
def test_cpt_trains_the_whole_model(scripts_dir: Path, vlm: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    home = tmp_path / "home"
    data_dir = tiny_vlm.write_data_dir(tmp_path / "visual-cpt", n_train=14, n_val=2, n_test=2, text_only=2)
    run = run_accelerate(scripts_dir, f"{VL}/cpt_accelerate.py", [
        f"--model_id={MODEL_ID}", f"--model_path={vlm}", f"--data_dir={data_dir}", "--num_train_epochs=1",
        "--per_device_train_batch_size=2", "--gradient_accumulation_steps=1", "--save_steps=2", "--eval_steps=2",
        "--logging_steps=1", "--learning_rate=1e-3", "--warmup_steps=1", "--max_seq_length=256", "--num_workers=0",
    ], home, timeout=240)
    assert run.returncode == 0, run.describe()
    results = home / "results" / "tiny" / "qwen3-vl-cpt"  # $HOME/results/<model_id>-cpt
    steps = sorted(int(p.name.split("-")[1]) for p in results.glob("checkpoint-*"))
    assert steps == [2, 4], steps  # 16 rows / (2 processes x 2) = 4 steps, every 2nd saved, 2 kept
    assert (results / "checkpoint-4" / "model.safetensors").is_file()
    assert (results / "checkpoint-4" / "processor_config.json").is_file()
    final = results / "final"
    assert (final / "config.json").is_file() and (final / "processor_config.json").is_file()
    before, after = load_file(vlm / "model.safetensors"), load_file(final / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {k for k in before if not bool((before[k] == after[k]).all())}
    assert any("visual" in k for k in changed) and any("language_model" in k for k in changed)
    assert "text-only" in run.stdout and "vision encoder trained" in run.stdout
    assert list((results / "logs").glob("events.out.tfevents.*"))


DATASET_PROBE = """
import json, sys
from pathlib import Path
from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import get_adapter_for_model
from mlrecipe_scripts.hf_trainer.vision_language.base.base_dataset import VLMCollator, VLMCPTDataset, VLMDataset
model, data = sys.argv[1], Path(sys.argv[2])
adapter = get_adapter_for_model(model)
processor = adapter.load_processor(model)
tok = processor.tokenizer
def labelled(sample):
    return tok.decode([t for t, l in zip(sample["input_ids"].tolist(), sample["labels"].tolist()) if l != -100])
out = {}
ds = VLMDataset(data / "rows.jsonl", adapter, processor, None, 256)
samples = [ds[i] for i in range(len(ds))]
out["labelled"] = [labelled(s) for s in samples]
out["grids"] = [s["image_grid_thw"].tolist() if "image_grid_thw" in s else None for s in samples]
batch = VLMCollator(adapter, tok.pad_token_id)(samples)
out["batch"] = {k: list(v.shape) for k, v in batch.items()}
out["lengths"] = [int(s["input_ids"].shape[0]) for s in samples]
out["pad_labels"] = batch["labels"][1, out["lengths"][1]:].tolist()
cpt = VLMCPTDataset(data / "rows.jsonl", adapter, processor, None, 256)[0]
out["cpt_all_targets"] = cpt["labels"].tolist() == cpt["input_ids"].tolist()
short = VLMDataset(data / "rows.jsonl", adapter, processor, None, out["lengths"][0] - 1)
shrunk = short[0]
out["shrunk"] = [int(shrunk["input_ids"].shape[0]), shrunk["image_grid_thw"].tolist()]
out["replaced"] = labelled(short[3])
print(json.dumps(out))
"""


def test_dataset_labels_shrinking_and_batches(scripts_dir: Path, vlm: Path, tmp_path: Path) -> None:
    """Labels cover every assistant turn and nothing else; CPT labels every token; an over-long sample has its image
    halved, one that cannot fit is replaced by the next; batches pad and concatenate the vision tensors."""
    from PIL import Image

    Image.new("RGB", (64, 64), (30, 60, 220)).save(tmp_path / "big.png")
    rows = [
        {"image": "big.png", "conversations": [
            {"from": "human", "value": "<image>\nWhat colour is the square?"}, {"from": "gpt", "value": "blue"},
            {"from": "user", "value": "Again?"}, {"role": "assistant", "content": "blue blue"}]},
        {"conversations": [{"from": "human", "value": "Say hello."}, {"from": "gpt", "value": "hello"}]},
        {"image": str(tmp_path / "big.png"), "conversations": [  # no <image> tag: the image goes first
            {"from": "human", "value": "Which colour do you see?"}, {"from": "gpt", "value": "blue"}]},
        {"conversations": [{"from": "human", "value": " ".join(["colour"] * 200)}, {"from": "gpt", "value": "no"}]},
        {"conversations": [{"from": "human", "value": "Count to three."}, {"from": "gpt", "value": "one two three"}]},
    ]
    tiny_vlm.write_jsonl(tmp_path / "rows.jsonl", rows)
    proc = subprocess.run([sys.executable, "-c", DATASET_PROBE, str(vlm), str(tmp_path)], cwd=scripts_dir / "vendor",
                          env=script_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    end = "<|im_end|>\n"
    assert out["labelled"][:3] == [f"blue{end}blue blue{end}", f"hello{end}", f"blue{end}"]
    assert out["grids"][0] == [[1, 4, 4]] and out["grids"][1] is None and out["grids"][2] == [[1, 4, 4]]
    n = len(out["lengths"])
    padded = -(-max(out["lengths"]) // 8) * 8
    assert out["batch"]["input_ids"] == [n, padded] and out["batch"]["labels"] == [n, padded]
    assert out["batch"]["image_grid_thw"] == [2, 3] and out["batch"]["pixel_values"][0] == 2 * 16
    assert set(out["pad_labels"]) == {-100}
    assert out["cpt_all_targets"] is True
    # 64x64 -> 32x32: 16 -> 4 patches, 4 -> 1 image token (merge 2x2)
    assert out["shrunk"][1] == [[1, 2, 2]] and out["shrunk"][0] == out["lengths"][0] - 3
    assert out["replaced"] == f"one two three{end}"  # row 4 stands in for the over-long row 3
    assert "using the next sample instead" in proc.stdout


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("script", ["peft_accelerate.py", "cpt_accelerate.py"])
def test_bad_input_gives_one_error_line(scripts_dir: Path, vlm: Path, tmp_path: Path, script: str) -> None:
    home = tmp_path / "home"
    run = run_python(scripts_dir, f"{VL}/{script}", [f"--model_path={vlm}", "--no_such_flag=1"], home)
    assert_error(run, "unrecognized arguments: --no_such_flag=1", status=2)

    not_a_model = tmp_path / "models" / "empty"
    not_a_model.mkdir(parents=True)
    run = run_python(scripts_dir, f"{VL}/{script}", [f"--model_path={not_a_model}"], home)
    assert_error(run, f"--model_path={not_a_model}", "not a model directory")

    text_model = tmp_path / "models" / "llama"
    text_model.mkdir()
    (text_model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    run = run_python(scripts_dir, f"{VL}/{script}", [f"--model_path={text_model}"], home)
    assert_error(run, f"--model_path={text_model}", "no vision-language adapter", "model_type 'llama'")

    data_dir = tiny_vlm.write_data_dir(tmp_path / "data", n_train=3, n_val=1, n_test=1, text_only=0)
    rows = read_jsonl(data_dir / "training.jsonl")
    missing = data_dir / rows[1]["image"]
    missing.unlink()
    run = run_python(scripts_dir, f"{VL}/{script}", [f"--model_path={vlm}", f"--data_dir={data_dir}"], home)
    assert_error(run, f"{data_dir / 'training.jsonl'}:2", f"image file {missing} not found")

    run = run_python(scripts_dir, f"{VL}/{script}", [f"--model_path={vlm}", f"--data_dir={tmp_path / 'nope'}"], home)
    assert_error(run, f"--data_dir={tmp_path / 'nope'}", "no such directory")
    assert not (home / "results").exists()


def test_missing_image_in_a_local_dataset(scripts_dir: Path, vlm: Path, tmp_path: Path) -> None:
    need_ml_stack()
    source = tmp_path / "src"
    rows = tiny_vlm.make_color_rows(source / "images", 4, rel_to=source)
    rows[2]["image"] = "images/gone.png"
    tiny_vlm.write_jsonl(source / "data.jsonl", rows)
    home = tmp_path / "home"
    run = run_python(scripts_dir, f"{VL}/peft_accelerate.py", [f"--model_path={vlm}", f"--hf_dataset_name={source}"],
                     home)
    assert_error(run, f"--hf_dataset_name={source}", f"image file {source / 'images' / 'gone.png'} not found")
    assert not list(home.rglob(".data_ready")) and not list(home.rglob("*.jsonl"))  # nothing half-written


# ------------------------------------------------------------------------------------------------ flags, registry

DEFAULTS = """
import json, sys
sys.argv = ["x"]
from mlrecipe_scripts.accelerate.vision_language import cpt_accelerate, peft_accelerate
from mlrecipe_scripts.hf_trainer.vision_language import training_common
out = {}
kinds = (("peft", peft_accelerate, training_common.SFT), ("cpt", cpt_accelerate, training_common.CPT))
for name, module, kind in kinds:
    args = module.parse_args([])
    paths = training_common.resolve_paths(args, kind)
    with_ds = module.parse_args(["--hf_dataset_name=org/ds"])
    out[name] = {"args": vars(args), "paths": [str(p) for p in paths],
                 "derived": str(training_common.resolve_paths(with_ds, kind)[0])}
    out[name]["no_freeze"] = module.parse_args(["--no_freeze_vision_encoder"]).freeze_vision_encoder
print(json.dumps(out))
"""


def test_flags_keep_the_reference_defaults(scripts_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-c", DEFAULTS], cwd=scripts_dir / "vendor", env=script_env(home),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    peft, cpt = out["peft"]["args"], out["cpt"]["args"]
    assert peft["model_id"] == "Qwen/Qwen3-VL-8B-Instruct" and peft["model_path"] is None
    assert (peft["freeze_vision_encoder"], cpt["freeze_vision_encoder"]) == (True, False)
    assert out["peft"]["no_freeze"] is False and out["cpt"]["no_freeze"] is False
    assert (peft["lora_rank"], peft["lora_alpha"], peft["lora_dropout"], peft["full_ft"], peft["lora_on_vision"]) == \
        (64, 16, 0.1, False, False)
    assert (peft["max_steps"], peft["gradient_accumulation_steps"], peft["learning_rate"], peft["warmup_steps"],
            peft["max_seq_length"], peft["eval_steps"], peft["max_eval_samples"], peft["num_workers"]) == \
        (10000, 16, 2e-5, 100, 8192, 100, 640, 4)
    assert (cpt["num_train_epochs"], cpt["warmup_steps"], cpt["max_seq_length"], cpt["hf_train_split_ratio"],
            cpt["save_steps"], cpt["save_total_limit"], cpt["eval_steps"], cpt["max_eval_samples"]) == \
        (3, 1000, 4096, 0.99, 1000, 2, 1000, None)
    assert "lora_rank" not in cpt and "early_stopping_patience" not in cpt
    assert peft["hf_download_images"] is True and peft["hf_split"] == "train" and peft["hf_num_proc"] == 8
    assert out["peft"]["paths"] == [str(home / "datasets" / "visual_instruct"),
                                    str(home / "results" / "Qwen" / "Qwen3-VL-8B-Instruct")]
    assert out["cpt"]["paths"] == [str(home / "datasets" / "visual_cpt"),
                                   str(home / "results" / "Qwen" / "Qwen3-VL-8B-Instruct-cpt")]
    assert out["peft"]["derived"] == str(home / "datasets" / "org_ds" / "default" / "train=90%-val=5%-test=5%")
    assert out["cpt"]["derived"] == str(home / "datasets" / "org_ds" / "default" /
                                        "train=99.00%-val=0.50%-test=0.50%")


def test_list_models_and_registry_smoke_test(scripts_dir: Path, tmp_path: Path, vlm: Path) -> None:
    for script in ("peft_accelerate.py", "cpt_accelerate.py"):
        run = run_python(scripts_dir, f"{VL}/{script}", ["--list_models"], tmp_path)
        assert run.returncode == 0 and "Qwen/Qwen3-VL-8B-Instruct" in run.stdout and "qwen3_vl" in run.stdout, \
            run.describe()
    run = run_python(scripts_dir, f"{VL}/test_adapters.py", [], tmp_path)
    assert run.returncode == 0 and "ALL CHECKS PASSED" in run.stdout and "FAIL" not in run.stdout, run.describe()
    probe = ("from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import get_adapter_for_model as g; "
             f"print(g({str(vlm)!r}).model_family)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=scripts_dir / "vendor", env=script_env(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "qwen-vl", proc.stderr  # a local dir is matched by its config's model_type
