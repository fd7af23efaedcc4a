"""The accelerate scripts' command lines: the reference recipes' exact argument lists, the flag families and quirks.

Parsing imports only the standard library (the scripts import torch / transformers inside ``main``), so these
tests are fast; the subprocess ones check exit status 2 for unknown flags and a fast ``--help``.
"""

from __future__ import annotations

import importlib
import shlex
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.frameworks.helpers import run_python

MODEL_PATH = "/fsx/pretrained-models/Qwen/Qwen3-14B"

# section 4 of the interface catalog: the recipes' arg lists (before the tee), $MODEL_PATH expanded by the shell
RECIPE_ARGS = {
    "peft": '--hf_model_id="Qwen/Qwen3-14B" --model_path=$MODEL_PATH --max_steps=10000 '
            "--per_device_train_batch_size=2 --per_device_eval_batch_size=2 --gradient_accumulation_steps=2 "
            "--eval_steps=100 --max_eval_samples=640 --early_stopping_threshold=0.0001 --early_stopping_patience=3",
    "convert": '--base_model="Qwen/Qwen3-14B" --model_path=$MODEL_PATH',
    "evaluate": '--base_model="Qwen/Qwen3-14B" --model_path=$MODEL_PATH --max_samples=1024 --batch_size=128',
    "cpt": '--hf_model_id="Qwen/Qwen3-14B" --model_path=$MODEL_PATH --num_train_epochs=3 '
           "--per_device_train_batch_size=2 --per_device_eval_batch_size=1 --gradient_accumulation_steps=1 "
           "--warmup_steps=1000 --eval_steps=1000 --save_steps=1000 --max_seq_length=4096",
}


def shell_args(key: str) -> list[str]:
    """The recipe's argument string as the shell passes it (quotes removed, $MODEL_PATH expanded)."""
    return shlex.split(RECIPE_ARGS[key].replace("$MODEL_PATH", MODEL_PATH))


@pytest.fixture(scope="module")
def peft(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.peft_accelerate")


@pytest.fixture(scope="module")
def cpt(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.text.cpt_accelerate")


@pytest.fixture(scope="module")
def convert(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.convert_checkpoint_to_hf")


@pytest.fixture(scope="module")
def evaluate(scripts_dir: Path) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.accelerate.test_checkpoint")


@pytest.fixture(scope="module")
def datamod(scripts_dir: Path, peft: ModuleType) -> ModuleType:
    return importlib.import_module("mlrecipe_scripts.hf_trainer.text_dataset")


def test_fine_tune_recipe_args(peft: ModuleType) -> None:
    args = peft.parse_args(shell_args("peft"))
    assert args.hf_model_id == "Qwen/Qwen3-14B"
    assert args.model_path == MODEL_PATH
    assert (args.max_steps, args.per_device_train_batch_size, args.per_device_eval_batch_size) == (10000, 2, 2)
    assert args.gradient_accumulation_steps == 2
    assert (args.eval_steps, args.max_eval_samples) == (100, 640)
    assert args.early_stopping_threshold == pytest.approx(0.0001)
    assert args.early_stopping_patience == 3
    # everything else keeps the dataclass defaults
    assert args.trust_remote_code is True and args.full_ft is False
    assert (args.lora_rank, args.lora_alpha, args.lora_dropout) == (32, 32, 0.1)
    assert args.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert (args.learning_rate, args.warmup_steps, args.max_seq_length) == (5e-5, 100, 2048)
    assert (args.logging_steps, args.seed, args.num_workers) == (10, 42, 8)
    assert args.data_dir is None and args.output_dir is None
    assert args.hfdc.dataset_name == "cognitivecomputations/dolphin"
    assert args.hfdc.dataset_config == "flan1m-alpaca-uncensored"
    assert args.hfdc.field_mapping == {"instruction": "instruction", "input": "input", "output": "output"}


def test_convert_and_evaluate_recipe_args(convert: ModuleType, evaluate: ModuleType) -> None:
    c = convert.parse_args(shell_args("convert"))
    assert (c.base_model, c.model_path, c.checkpoints_dir) == ("Qwen/Qwen3-14B", MODEL_PATH, None)
    assert (c.full_ft, c.no_merge, c.lora_rank, c.lora_alpha) == (False, False, 32, 32)
    assert c.lora_target_modules == "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    e = evaluate.parse_args(shell_args("evaluate"))
    assert (e.base_model, e.model_path, e.max_samples, e.batch_size) == ("Qwen/Qwen3-14B", MODEL_PATH, 1024, 128)
    assert (e.temperature, e.top_k, e.top_p, e.max_tokens) == (0.1, -1, 0.95, 512)
    assert (e.tensor_parallel_size, e.gpu_memory_utilization, e.max_model_len, e.dtype) == (8, 0.9, 8192, "bfloat16")
    assert e.full_ft is False and e.test_path is None


def test_cpt_recipe_args(cpt: ModuleType, datamod: ModuleType) -> None:
    args = cpt.parse_args(shell_args("cpt"))
    assert (args.num_train_epochs, args.per_device_train_batch_size, args.per_device_eval_batch_size) == (3, 2, 1)
    assert (args.gradient_accumulation_steps, args.warmup_steps, args.eval_steps, args.save_steps) == (1, 1000,
                                                                                                       1000, 1000)
    assert args.max_seq_length == 4096 and args.save_total_limit == 2 and args.max_eval_samples is None
    assert args.hfdc.dataset_name == "wikimedia/wikipedia" and args.hfdc.train_split_ratio == 0.995
    assert (args.hfdc.input_template, args.hfdc.output_template, args.hfdc.field_mapping) == ("", "{text}", None)
    home = Path("/efs/home/rel")
    assert cpt.default_output_dir(args.hf_model_id, home) == home / "results" / "Qwen_Qwen3-14B-cpt"
    assert datamod.default_data_dir(args.hfdc, home, decimals=2) == \
        home / "datasets" / "wikimedia_wikipedia" / "20231101.en" / "train=99.50%-val=0.25%-test=0.25%"


def test_default_paths(peft: ModuleType, datamod: ModuleType) -> None:
    from mlrecipe_scripts.accelerate.common import results_dir

    home = Path("/efs/home/rel")
    args = peft.parse_args([])
    assert datamod.default_data_dir(args.hfdc, home) == \
        home / "datasets" / "cognitivecomputations_dolphin" / "flan1m-alpaca-uncensored" / "train=90%-val=5%-test=5%"
    assert results_dir("Qwen/Qwen3-14B", home) == home / "results" / "Qwen" / "Qwen3-14B"


def test_d0_flag_rules(peft: ModuleType) -> None:
    args = peft.parse_args(["--trust_remote_code", "--full_ft", "--use_wandb", "--lora_target_modules= q_proj ,v_proj",
                            "--lora_rank=8"])
    assert args.trust_remote_code is False  # quirk: the flag flips a True default
    assert args.full_ft is True and args.use_wandb is True
    assert args.lora_target_modules == ["q_proj", "v_proj"] and args.lora_rank == 8


def test_hfdc_rebuild_rule(peft: ModuleType, cpt: ModuleType) -> None:
    args = peft.parse_args(["--hfdc_dataset_name=/data/x", "--hfdc_field_mapping={\"instruction\": \"q\"}",
                            "--hfdc_input_template=### Q:\\n{instruction}"])
    assert args.hfdc.dataset_name == "/data/x"
    assert args.hfdc.dataset_config is None  # class default, not dolphin's config
    assert args.hfdc.field_mapping == {"instruction": "q"}
    assert args.hfdc.input_template == "### Q:\\n{instruction}"  # not unescaped
    assert args.hfdc.output_template == "### Response:\n{output}"
    assert args.hfdc.num_proc == 8
    c = cpt.parse_args(["--hfdc_dataset_name=/data/t", "--hfdc_field_mapping=", "--hfdc_input_template=",
                        "--hfdc_output_template={text}", "--hfdc_train_split_ratio=0.8"])
    assert c.hfdc.field_mapping is None and c.hfdc.input_template == "" and c.hfdc.train_split_ratio == 0.8


def test_gradient_checkpointing_flag(peft: ModuleType) -> None:
    """``--gradient_checkpointing``: auto (default) = on with CUDA, off on CPU; true, false or the bare flag force
    it."""
    default = peft.parse_args([])
    assert default.gradient_checkpointing == "auto"
    assert peft.use_checkpointing(default, "cuda") is True and peft.use_checkpointing(default, "cpu") is False
    for argv, value in ((["--gradient_checkpointing"], "true"), (["--gradient_checkpointing=True"], "true"),
                        (["--gradient_checkpointing", "false"], "false"), (["--gradient_checkpointing=0"], "false"),
                        (["--gradient_checkpointing=AUTO"], "auto")):
        args = peft.parse_args(argv)
        assert args.gradient_checkpointing == value, argv
        if value != "auto":
            assert peft.use_checkpointing(args, "cpu") is peft.use_checkpointing(args, "cuda") is (value == "true")
    usage = peft.build_parser().format_help()
    assert "--gradient_checkpointing [{true,false,auto}]" in usage and "off on CPU" in usage


@pytest.mark.parametrize("argv, needle", [
    (["--gradient_checkpointing=maybe"], "--gradient_checkpointing"),
    (["--hfdc_split=validation"], "--hfdc_dataset_name"),
    (["--hfdc_dataset_name=x", "--hfdc_field_mapping=[1, 2]"], "--hfdc_field_mapping"),
    (["--max_steps=ten"], "--max_steps"),
    (["--no_such_flag=1"], "--no_such_flag"),
])
def test_d0_bad_flags_exit_2(peft: ModuleType, argv: list[str], needle: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        peft.parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_family_c_and_t(convert: ModuleType, evaluate: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    c = convert.parse_args(["--full_ft", "--no_merge", "--lora_target_modules=q_proj,v_proj"])
    assert c.full_ft is True and c.no_merge is True
    e = evaluate.parse_args(["--full_ft=False"])
    assert e.full_ft is True  # quirk kept: any non-empty string is true
    assert "counts as true" in capsys.readouterr().out
    assert evaluate.parse_args(["--full_ft="]).full_ft is False
    with pytest.raises(SystemExit) as exc:
        evaluate.parse_args(["--full_ft"])  # typed str: a value is required
    assert exc.value.code == 2


def test_sampling_rules(evaluate: ModuleType) -> None:
    greedy = evaluate.Sampling.from_args(evaluate.parse_args(["--temperature=0", "--top_k=0", "--top_p=0.5"]))
    assert (greedy.greedy, greedy.top_p, greedy.top_k) == (True, 1.0, -1)
    sampled = evaluate.Sampling.from_args(evaluate.parse_args(["--top_k=5"]))
    assert (sampled.greedy, sampled.temperature, sampled.top_p, sampled.top_k) == (False, 0.1, 0.95, 5)


def test_local_metrics(evaluate: ModuleType) -> None:
    assert evaluate.token_f1("two five eight", "### Response:\ntwo five eight") == pytest.approx(1.5 / 1.75)
    assert evaluate.token_f1("", "") == 1.0 and evaluate.token_f1("a", "") == 0.0
    assert evaluate.rouge_l_f1("a b c d", "a c d") == pytest.approx(2 * 0.75 * 1.0 / 1.75)
    name, scores = evaluate.score(["red red", "LION"], ["red red", "TIGER"])
    assert "local" in name and scores["token_f1"] == pytest.approx(0.5)


@pytest.mark.integration
@pytest.mark.parametrize("script", ["text/peft_accelerate.py", "text/cpt_accelerate.py",
                                    "shared/convert_checkpoint_to_hf.py", "shared/test_checkpoint.py"])
def test_unknown_flag_and_help(scripts_dir: Path, tmp_path: Path, script: str) -> None:
    run = run_python(scripts_dir, script, ["--definitely_not_a_flag=1"], tmp_path)
    assert run.returncode == 2, run.describe()
    assert "--definitely_not_a_flag" in run.stderr
    start = time.monotonic()
    run = run_python(scripts_dir, script, ["--help"], tmp_path)
    assert run.returncode == 0 and "usage:" in run.stdout, run.describe()
    assert time.monotonic() - start < 5, "--help must not import torch/transformers"
    assert not (scripts_dir / script).with_suffix(".pyc").exists()
