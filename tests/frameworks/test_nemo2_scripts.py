"""The ``framework: nemo2`` scripts: command lines, defaults, pure configuration, data, checkpoint look-up.

NeMo 2 (``nemo.collections.llm``, Megatron-Core, nemo_run) trains on GPUs only, and most of these tests run without it
(a stub package shadows any installed one). They cover everything that runs before NeMo is imported: the reference
recipes' argument lists (§4 of the interface catalog) parse unchanged, the defaults are the catalog's, unknown flags
exit 2, the flags map onto the recipe overrides / callbacks / logger / DataModule configs and the parallelism
arithmetic, the data preparation writes the ``data_dir`` layout, the checkpoint look-up and output names; and that a
missing NeMo (a stub package shadows any installed one) or a missing checkpoint ends the script with one ``error:``
line and a non-zero status, the latter before NeMo is imported.

With NeMo 2 installed (``make nemo2-env``, which ``make test`` runs: ``.venv-nemo2``; or
``MLRECIPE_NEMO2_PYTHON=<python with NeMo 2>``), ``fine_tune.py`` also runs in its dry-run mode with the real library
(the recipe is built, serialized for the workers and printed; nothing is launched) - marked ``integration``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.frameworks.helpers import REPO, Run, script_env

NEMO2_SCRIPTS = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / "nemo2"
MODEL_PATH = "/fsx/pretrained-models/Qwen/Qwen3-14B"
NEMO_IMAGE = "nvcr.io/nvidia/nemo:25.09"
NEMO2_ENV_PYTHON = REPO / ".venv-nemo2" / "bin" / "python"  #: `make nemo2-env`

# section 4: the recipes' argument lists (before the tee), as the shell passes them ($PET_* for 2 x p4d)
PET = {"$PET_NODE_RANK": "0", "$PET_NNODES": "2", "$PET_NPROC_PER_NODE": "8", "$MODEL_PATH": MODEL_PATH}
RECIPE_ARGS = {
    "fine_tune.py": '--node_rank=$PET_NODE_RANK --num_nodes=$PET_NNODES --gpus_per_node=$PET_NPROC_PER_NODE '
                    '--hf_model_id="Qwen/Qwen3-14B" --model_path=$MODEL_PATH --recipe_cls_name="qwen3_14b" '
                    "--micro_batch_size=4 --accumulate_grad_batches=8 --max_steps=10000 --val_check_interval=800 "
                    "--limit_val_batches=80 --early_stopping_threshold=0.0001 --early_stopping_patience=3 "
                    "--tensor_parallel_size=$PET_NPROC_PER_NODE --pipeline_parallel_size=1",
    "convert_checkpoint_to_hf.py": "",
    "test_checkpoint.py": "--gpus_per_node=$PET_NPROC_PER_NODE --num_nodes=1",
}


def recipe_args(script: str, **pet: str) -> list[str]:
    text = RECIPE_ARGS[script]
    for var, value in {**PET, **pet}.items():
        text = text.replace(var, value)
    return shlex.split(text)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``scripts/nemo2`` (as the chart's init container makes ``/etc/framework-scripts``)."""
    target = tmp_path_factory.mktemp("etc-nemo2") / "framework-scripts"
    shutil.copytree(NEMO2_SCRIPTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


@dataclasses.dataclass
class Modules:
    common: ModuleType
    data: ModuleType
    fine_tune: ModuleType
    convert: ModuleType
    evaluate: ModuleType


@pytest.fixture(scope="module")
def mods() -> Modules:
    """The nemo2 modules of the package (importing them does not import NeMo)."""
    loaded = Modules(*(importlib.import_module(f"mlrecipe_scripts.nemo2.{name}") for name in (
        "nemo2_common", "nemo2_dataset", "fine_tune", "convert_checkpoint_to_hf", "test_checkpoint")))
    assert "nemo" not in sys.modules and "nemo_run" not in sys.modules
    return loaded


def make_stub(root: Path, flavor: str) -> Path:
    """A directory that shadows NeMo on ``PYTHONPATH``: ``absent`` (importing ``nemo`` / ``nemo_run`` fails) or
    ``nemo3`` (a ``nemo`` package without ``nemo.collections.llm``, as NeMo 3 is). Importing ``nemo`` appends a line to
    ``$NEMO_STUB_RECORD``, so a test can tell whether a script got as far as importing NeMo."""
    record = "import os\nopen(os.environ['NEMO_STUB_RECORD'], 'a').write('nemo imported\\n')\n"
    (root / "nemo" / "collections").mkdir(parents=True)
    (root / "nemo_run").mkdir()
    missing = "raise ModuleNotFoundError(\"No module named '{0}' (test stub)\", name='{0}')\n"
    if flavor == "absent":
        (root / "nemo" / "__init__.py").write_text(record + missing.format("nemo"))
    else:
        (root / "nemo" / "__init__.py").write_text(record)
        (root / "nemo" / "collections" / "__init__.py").write_text("")
    (root / "nemo_run" / "__init__.py").write_text(missing.format("nemo_run"))
    return root


def run_script(scripts: Path, script: str, args: list[str], home: Path, stub: Path, timeout: int = 60,
               **env: str) -> Run:
    """``cd $SCRIPTS_DIR && python <script> <args>`` with the NeMo stub first on ``PYTHONPATH``."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, script, *args], cwd=scripts, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env=script_env(home, PYTHONPATH=str(stub), NEMO_STUB_RECORD=str(home / "stub-record"),
                                         **env))
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def assert_one_error_line(run: Run, *needles: str, code: int = 1) -> None:
    assert run.returncode == code, run.describe()
    line = run.last_error_line
    assert line.startswith("error: "), run.describe()
    for needle in needles:
        assert needle in line, run.describe()
    assert "Traceback" not in run.stderr, run.describe()


# --------------------------------------------------------------------------------------------------------------
# command lines


def test_recipe_command_lines_parse(mods: Modules) -> None:
    config = mods.fine_tune.parse_args(recipe_args("fine_tune.py"))
    assert (config.node_rank, config.num_nodes, config.gpus_per_node) == (0, 2, 8)
    assert (config.hf_model_id, config.model_path) == ("Qwen/Qwen3-14B", MODEL_PATH)
    assert config.recipe_cls_name == "qwen3_14b"
    assert (config.micro_batch_size, config.accumulate_grad_batches, config.max_steps) == (4, 8, 10000)
    assert (config.val_check_interval, config.limit_val_batches) == (800, 80)
    assert (config.early_stopping_threshold, config.early_stopping_patience) == (0.0001, 3)
    assert (config.tensor_parallel_size, config.pipeline_parallel_size, config.context_parallel_size) == (8, 1, 1)
    layout = mods.fine_tune.layout_of(config)
    assert (layout.world_size, layout.data_parallel, layout.global_batch_size) == (16, 2, 64)
    assert mods.convert.parse_args(recipe_args("convert_checkpoint_to_hf.py")) == mods.convert.ExportConfig()
    evaluate = mods.evaluate.parse_args(recipe_args("test_checkpoint.py"))
    assert (evaluate.gpus_per_node, evaluate.num_nodes, evaluate.tensor_parallel_size) == (8, 1, 8)


def test_defaults_match_the_catalog(mods: Modules, tmp_path: Path) -> None:
    ft = mods.fine_tune.parse_args([])
    expected = {
        "model_path": None, "hf_model_id": "Qwen/Qwen3-8B", "recipe_cls_name": "qwen3_8b", "data_dir": None,
        "output_dir": None, "nemo_ckpt_dir": None, "num_nodes": 1, "gpus_per_node": 8, "node_rank": 0,
        "tensor_parallel_size": 8, "pipeline_parallel_size": 1, "context_parallel_size": 1, "max_steps": 10000,
        "val_check_interval": 800, "log_every_n_steps": 10, "micro_batch_size": 8, "accumulate_grad_batches": 8,
        "limit_val_batches": 80, "early_stopping_patience": 3, "early_stopping_threshold": 0.001,
        "peft_scheme": "lora", "full_ft": False, "max_seq_length": 2048, "enable_megatron_progress_bar": False,
        "enable_nsys_callback": False, "enable_pytorch_profiler": False, "enable_speed_monitor": False,
        "enable_memory_monitor": False, "enable_runtime_estimator": False, "enable_memory_profile": False,
        "use_wandb": False}
    values = dataclasses.asdict(ft)
    dataset = values.pop("hf_dataset_config")
    assert values == expected
    assert dataset == {
        "dataset_name": "cognitivecomputations/dolphin", "dataset_config": "flan1m-alpaca-uncensored",
        "split": "train", "train_split_ratio": 0.9, "val_test_split_ratio": 0.5,
        "input_template": "### Instruction:\n{instruction}\n ### Input:\n{input}\n",
        "output_template": "### Response:\n{output}",
        "field_mapping": {"instruction": "instruction", "input": "input", "output": "output"},
        "num_proc": 8, "load_kwargs": {}, "custom_converter": None}
    resolved = ft.resolved(tmp_path)
    assert resolved.model_path == "Qwen/Qwen3-8B"
    assert resolved.data_dir == str(tmp_path / "datasets" / "cognitivecomputations_dolphin" /
                                    "flan1m-alpaca-uncensored" / "train=90%-val=5%-test=5%")
    assert resolved.output_dir == str(tmp_path / "outputs" / "Qwen" / "Qwen3-8B")
    assert resolved.nemo_ckpt_dir == str(tmp_path / "outputs" / "Qwen" / "Qwen3-8B" / "imported_hf_ckpt")

    assert dataclasses.asdict(mods.convert.parse_args([])) == {
        "nemo_logs_dir": None, "target": "hf", "overwrite": False, "no_merge": False, "use_modelopt": False}
    assert dataclasses.asdict(mods.evaluate.parse_args([])) == {
        "nemo_logs_dir": None, "test_path": None, "max_samples": 1024, "gpus_per_node": 8, "num_nodes": 1,
        "tensor_parallel_size": 8, "pipeline_parallel_size": 1, "context_parallel_size": 1, "temperature": 0.1,
        "top_k": 0, "top_p": 0.95, "num_tokens_to_generate": 512, "random_seed": 42, "max_batch_size": 16,
        "block_size_tokens": 256, "buffer_size_gb": 20.0, "max_tokens": 65536, "inference_max_seq_length": 8192}


def exit_code(parse, argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        parse(argv)
    return int(info.value.code)


def test_flag_families(mods: Modules) -> None:
    parse = mods.fine_tune.parse_args
    flags = parse(["--full_ft", "--use_wandb", "--enable_speed_monitor", "--enable_memory_profile"])
    assert flags.full_ft and flags.use_wandb and flags.enable_speed_monitor and flags.enable_memory_profile
    assert exit_code(parse, ["--full_ft=true"]) == 2  # a flag, no value
    assert exit_code(parse, ["--log_level=INFO"]) == 2  # not a flag
    assert exit_code(parse, ["--hfdc_cache_dir=/x"]) == 2  # only the Lightning scripts have it
    assert exit_code(parse, ["--hfdc_split=train"]) == 2  # any --hfdc_* rebuilds the config: dataset_name required
    assert exit_code(parse, ["--hfdc_dataset_name=x", "--hfdc_field_mapping=[1]"]) == 2
    given = parse(["--hfdc_dataset_name=org/data", "--hfdc_train_split_ratio=0.8",
                   '--hfdc_field_mapping={"instruction": "q", "output": "a"}',
                   "--hfdc_input_template=### Q:\\n{instruction}"]).hf_dataset_config
    assert (given.dataset_name, given.dataset_config, given.train_split_ratio) == ("org/data", None, 0.8)
    assert given.field_mapping == {"instruction": "q", "output": "a"}
    assert given.input_template == "### Q:\\n{instruction}"  # not unescaped, as in the reference
    assert exit_code(parse, ["--hfdc_dataset_name=x", "--hfdc_train_split_ratio=1"]) == 2
    convert = mods.convert.parse_args(["--overwrite", "--no_merge", "--use_modelopt", "--target=hf"])
    assert convert.overwrite and convert.no_merge and convert.use_modelopt
    assert exit_code(mods.convert.parse_args, ["--no_merge=1"]) == 2
    assert mods.evaluate.parse_args(["--top_k=5", "--buffer_size_gb=2.5"]).top_k == 5
    assert exit_code(mods.evaluate.parse_args, ["--top_k=five"]) == 2


@pytest.mark.parametrize("argv, needle", [
    (["--tensor_parallel_size=3"], "does not divide the 8 GPUs"),
    (["--num_nodes=2", "--node_rank=2"], "--node_rank=2"),
    (["--enable_nsys_callback", "--enable_pytorch_profiler"], "cannot be used together"),
    (["--max_steps=100"], "--val_check_interval=800: larger than --max_steps=100"),
    (["--peft_scheme=qlora"], "--peft_scheme=qlora"),
    (["--recipe_cls_name=qwen3-14b"], "--recipe_cls_name=qwen3-14b"),
    (["--micro_batch_size=0"], "--micro_batch_size=0"),
])
def test_fine_tune_value_errors_exit_2(mods: Modules, capsys: pytest.CaptureFixture[str], argv: list[str],
                                       needle: str) -> None:
    assert exit_code(mods.fine_tune.parse_args, argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--num_tokens_to_generate=8192"], "--inference_max_seq_length=8192"),
    (["--top_p=1.5"], "--top_p=1.5"),
    (["--gpus_per_node=4"], "does not divide the 4 GPUs"),
    (["--max_batch_size=0"], "--max_batch_size=0"),
])
def test_checkpoint_value_errors_exit_2(mods: Modules, capsys: pytest.CaptureFixture[str], argv: list[str],
                                        needle: str) -> None:
    assert exit_code(mods.evaluate.parse_args, argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize("script", list(RECIPE_ARGS))
def test_unknown_flag_exits_2_and_help_is_fast(scripts: Path, tmp_path: Path, script: str) -> None:
    stub = make_stub(tmp_path / "stub", "absent")
    run = run_script(scripts, script, ["--bogus=1"], tmp_path, stub)
    assert run.returncode == 2, run.describe()
    assert "unrecognized arguments: --bogus=1" in run.stderr
    helped = run_script(scripts, script, ["--help"], tmp_path, stub)
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.describe()
    assert not (tmp_path / "stub-record").exists()  # neither imports NeMo


# --------------------------------------------------------------------------------------------------------------
# configuration that is pure Python


@pytest.mark.parametrize("topology, expected", [
    ((1, 8, 8, 1, 1, 8, 8), (8, 1, 64)),   # defaults: TP 8 on one node
    ((2, 8, 8, 1, 1, 4, 8), (16, 2, 64)),  # the reference recipe: 2 x p4d
    ((2, 8, 2, 2, 1, 1, 4), (16, 4, 16)),
    ((1, 8, 2, 1, 2, 2, 3), (8, 2, 12)),   # context parallelism is not data parallelism
    ((1, 1, 1, 1, 1, 2, 2), (1, 1, 4)),
])
def test_parallel_layout(mods: Modules, topology: tuple[int, ...], expected: tuple[int, int, int]) -> None:
    layout = mods.fine_tune.parallel_layout(*topology)
    assert (layout.world_size, layout.data_parallel, layout.global_batch_size) == expected
    nodes, gpus, tp, pp, cp = topology[:5]
    assert layout.model_parallel * layout.data_parallel == nodes * gpus == layout.world_size
    assert mods.common.data_parallel_size(nodes, gpus, tp, pp, cp) == layout.data_parallel


@pytest.mark.parametrize("topology", [(1, 8, 3, 1, 1), (2, 8, 8, 4, 1), (1, 4, 2, 1, 4)])
def test_parallel_layout_errors(mods: Modules, topology: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="does not divide"):
        mods.fine_tune.parallel_layout(*topology, 1, 1)


def test_recipe_overrides_and_specs(mods: Modules, tmp_path: Path) -> None:
    ft = mods.fine_tune
    config = ft.parse_args(recipe_args("fine_tune.py")).resolved(tmp_path)
    layout = ft.layout_of(config)
    overrides = ft.recipe_overrides(config, layout)
    assert overrides["resume.restore_config.path"] == str(tmp_path / "outputs/Qwen/Qwen3-14B/imported_hf_ckpt")
    assert overrides["tokenizer"] == "data"
    expected = {"trainer.num_nodes": 2, "trainer.devices": 8, "trainer.max_steps": 10000,
                "trainer.val_check_interval": 800, "trainer.limit_val_batches": 80, "trainer.log_every_n_steps": 10,
                "trainer.accumulate_grad_batches": 1, "trainer.strategy.tensor_model_parallel_size": 8,
                "trainer.strategy.pipeline_model_parallel_size": 1, "trainer.strategy.context_parallel_size": 1}
    assert {k: overrides[k] for k in expected} == expected
    assert "model.config.calculate_per_token_loss" not in overrides

    data = overrides["data"]
    assert data.target == "mlrecipe_scripts.nemo2.nemo2_dataset.GeneralizedHFDataModule"
    assert data.kwargs["global_batch_size"] == 64 and data.kwargs["micro_batch_size"] == 4
    assert data.kwargs["seq_length"] == 2048 and data.kwargs["hf_model_id"] == MODEL_PATH
    assert data.kwargs["dataset_root"] == config.data_dir
    assert json.loads(json.dumps(data.kwargs["config"]))["dataset_name"] == "cognitivecomputations/dolphin"

    log = overrides["log"]
    assert log.target == "nemo.lightning.NeMoLogger"
    assert (log.kwargs["name"], log.kwargs["log_dir"], log.kwargs["wandb"]) == ("nemo_logs", config.output_dir, None)
    assert log.kwargs["ckpt"].kwargs == {"monitor": "val_loss", "mode": "min", "save_last": "link", "save_top_k": 1,
                                         "save_weights_only": True}
    assert log.kwargs["tensorboard"].kwargs == {"save_dir": "tb_logs", "name": "peft_megatron"}
    with_wandb = ft.logger_spec(dataclasses.replace(config, use_wandb=True))
    assert with_wandb.kwargs["wandb"].target == "lightning.pytorch.loggers.WandbLogger"

    [early] = ft.callback_specs(config)
    assert early.target == "lightning.pytorch.callbacks.EarlyStopping"
    assert (early.kwargs["min_delta"], early.kwargs["patience"], early.kwargs["monitor"]) == (0.0001, 3, "val_loss")
    every = dataclasses.replace(config, enable_megatron_progress_bar=True, enable_memory_monitor=True,
                                enable_speed_monitor=True, enable_memory_profile=True, enable_runtime_estimator=True,
                                enable_pytorch_profiler=True)
    names = [spec.target.rsplit(".", 1)[1] for spec in ft.callback_specs(every, metrics_file="/m.jsonl")]
    assert names == ["EarlyStopping", "MegatronProgressBar", "MemoryMonitor", "SpeedMonitor", "MemoryProfileCallback",
                     "RuntimeEstimator", "PytorchProfilerCallback", "MetricsCallback"]
    profiles = {s.target.rsplit(".", 1)[1]: s.kwargs for s in ft.callback_specs(every)}
    assert profiles["MemoryProfileCallback"]["dir"] == str(Path(config.output_dir) / "mem_profile")
    assert profiles["PytorchProfilerCallback"]["trace_dir"] == str(Path(config.output_dir) / "trace")
    nsys = dataclasses.replace(config, enable_nsys_callback=True)
    assert ft.callback_specs(nsys)[-1].kwargs == {"start_step": 0, "end_step": 1, "ranks": [0], "gen_shape": True,
                                                  "nvtx_ranges": False}

    cp = ft.parse_args(["--context_parallel_size=2", "--tensor_parallel_size=4"]).resolved(tmp_path)
    assert ft.recipe_overrides(cp, ft.layout_of(cp))["model.config.calculate_per_token_loss"] is True


@pytest.mark.parametrize("argv, scheme", [([], "lora"), (["--peft_scheme=DoRA"], "dora"), (["--full_ft"], None),
                                          (["--peft_scheme=none"], None), (["--full_ft", "--peft_scheme=x"], None)])
def test_peft_choice(mods: Modules, argv: list[str], scheme: str | None) -> None:
    assert mods.fine_tune.peft_choice(mods.fine_tune.parse_args(argv)) == scheme


def test_distributed_env(mods: Modules) -> None:
    ft = mods.fine_tune
    one = ft.parse_args([])
    assert ft.distributed_env(one, {}) == {}
    two = ft.parse_args(recipe_args("fine_tune.py", **{"$PET_NODE_RANK": "1"}))
    with pytest.raises(mods.common.ScriptError, match="MASTER_ADDR"):
        ft.distributed_env(two, {})
    env = {"PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}
    assert ft.distributed_env(two, env) == {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "NODE_RANK": "1"}
    assert ft.distributed_env(two, {"MASTER_ADDR": "a", "MASTER_PORT": "1", "NODE_RANK": "1"})["MASTER_ADDR"] == "a"
    with pytest.raises(mods.common.ScriptError, match="NODE_RANK=0"):
        ft.distributed_env(two, {**env, "NODE_RANK": "0"})


# --------------------------------------------------------------------------------------------------------------
# NeMo missing, checkpoint missing


@pytest.mark.integration
@pytest.mark.parametrize("flavor", ["absent", "nemo3"])
def test_missing_nemo_is_one_error_line(scripts: Path, tmp_path: Path, flavor: str) -> None:
    stub = make_stub(tmp_path / "stub", flavor)
    run = run_script(scripts, "fine_tune.py", recipe_args("fine_tune.py"), tmp_path, stub)
    assert_one_error_line(run, "fine_tune.py requires NeMo 2", "nemo.collections.llm", NEMO_IMAGE)
    assert (tmp_path / "stub-record").exists()
    assert not (tmp_path / "datasets").exists() and not (tmp_path / "outputs").exists()  # nothing prepared


def fake_run(home: Path, stamp: str, names: list[str], age: float, lora_base: Path | None = None) -> Path:
    """``$HOME/outputs/Qwen/Qwen3-14B/nemo_logs/<stamp>/checkpoints/<names>`` (each with context/ and weights/),
    modification times ``age`` seconds in the past (later names newer)."""
    checkpoints = home / "outputs" / "Qwen" / "Qwen3-14B" / "nemo_logs" / stamp / "checkpoints"
    now = time.time() - age
    for i, name in enumerate(names):
        for sub in ("context", "weights"):
            (checkpoints / name / sub).mkdir(parents=True, exist_ok=True)
        if lora_base is not None:
            (checkpoints / name / "weights" / "adapter_metadata.json").write_text(
                json.dumps({"model_ckpt_path": str(lora_base)}))
        os.utime(checkpoints / name, (now + i, now + i))
    os.utime(checkpoints.parent, (now + len(names), now + len(names)))
    os.utime(checkpoints.parent.parent, (now + len(names), now + len(names)))
    return checkpoints


BEST = "nemo_logs--val_loss=0.8123-epoch=0-consumed_samples=51200.0"


def test_checkpoint_lookup(mods: Modules, tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = home / "outputs" / "Qwen" / "Qwen3-14B" / "imported_hf_ckpt"
    (base / "weights").mkdir(parents=True)
    fake_run(home, "2025-01-01_10-00-00", ["nemo_logs--val_loss=0.9000-epoch=0-consumed_samples=6400.0"], age=500)
    checkpoints = fake_run(home, "2025-01-02_10-00-00", ["nemo_logs--val_loss=0.9900-epoch=0-consumed_samples=12800.0",
                                                         BEST], age=100, lora_base=base)
    (checkpoints / f"{BEST}-last").symlink_to(checkpoints / BEST)  # save_last="link"
    for suffix in (".hf_model", ".merged", ".hf_peft"):  # earlier exports, newer than the checkpoints: skipped
        (checkpoints / (BEST + suffix) / "context").mkdir(parents=True)
    (checkpoints.parent / "not-a-run").mkdir()
    find = mods.common.find_checkpoint
    assert find(None, home) == checkpoints / BEST
    assert find(str(checkpoints.parent.parent), home) == checkpoints / BEST
    assert find(str(checkpoints.parent), home) == checkpoints / BEST  # a run directory
    assert find(str(checkpoints / BEST), home) == checkpoints / BEST  # a checkpoint directory
    assert mods.common.sibling(checkpoints / BEST, ".hf_model").name == BEST + ".hf_model"

    plan = mods.convert.make_plan(mods.convert.parse_args(["--overwrite"]), home)
    assert plan.lora and plan.base == base and plan.checkpoint == checkpoints / BEST
    assert plan.output == checkpoints / (BEST + ".hf_model") and plan.merged == checkpoints / (BEST + ".merged")
    with pytest.raises(mods.common.ScriptError, match=r"\.hf_model: already exists \(pass --overwrite"):
        mods.convert.make_plan(mods.convert.parse_args([]), home)
    adapter = mods.convert.make_plan(mods.convert.parse_args(["--no_merge", "--overwrite"]), home)
    assert adapter.output.name == BEST + ".hf_peft" and adapter.merged is None
    shutil.rmtree(base)
    with pytest.raises(mods.common.ScriptError, match=re.escape(f"{base}: no such directory")):
        mods.convert.make_plan(mods.convert.parse_args(["--overwrite"]), home)

    full = tmp_path / "full"
    full_ckpts = fake_run(full, "2025-02-01_10-00-00", [BEST], age=10)
    plan = mods.convert.make_plan(mods.convert.parse_args([]), full)
    assert not plan.lora and plan.merged is None and plan.output == full_ckpts / (BEST + ".hf_model")
    with pytest.raises(mods.common.ScriptError, match=r"--no_merge: .* is a full fine-tuning checkpoint"):
        mods.convert.make_plan(mods.convert.parse_args(["--no_merge"]), full)
    shutil.rmtree(full_ckpts / BEST / "weights")
    with pytest.raises(mods.common.ScriptError, match="weights: no such directory"):
        mods.common.check_checkpoint(full_ckpts / BEST)


@pytest.mark.integration
@pytest.mark.parametrize("script", ["convert_checkpoint_to_hf.py", "test_checkpoint.py"])
def test_missing_checkpoint_named_before_nemo(scripts: Path, tmp_path: Path, script: str) -> None:
    stub = make_stub(tmp_path / "stub", "absent")
    missing = tmp_path / "no" / "such" / "nemo_logs"
    run = run_script(scripts, script, [f"--nemo_logs_dir={missing}"], tmp_path, stub)
    assert_one_error_line(run, f"--nemo_logs_dir={missing}: no such directory")
    run = run_script(scripts, script, [], tmp_path, stub)  # default: $HOME/outputs
    assert_one_error_line(run, f"no nemo_logs directory under {tmp_path / 'outputs'}")
    empty_run = tmp_path / "outputs" / "m" / "nemo_logs" / "2025-01-01_00-00-00" / "checkpoints"
    empty_run.mkdir(parents=True)
    run = run_script(scripts, script, [], tmp_path, stub)
    assert_one_error_line(run, str(empty_run), "no nemo_logs--* checkpoint")
    assert not (tmp_path / "stub-record").exists()  # NeMo was never imported


@pytest.mark.integration
@pytest.mark.parametrize("script", ["convert_checkpoint_to_hf.py", "test_checkpoint.py"])
def test_found_checkpoint_then_missing_nemo(scripts: Path, tmp_path: Path, script: str) -> None:
    stub = make_stub(tmp_path / "stub", "absent")
    fake_run(tmp_path, "2025-01-02_10-00-00", [BEST], age=10)
    test_file = tmp_path / "datasets" / "d" / "test.jsonl"
    test_file.parent.mkdir(parents=True)
    test_file.write_text(json.dumps({"input": "q", "output": "a"}) + "\n")
    args = recipe_args(script)
    run = run_script(scripts, script, args, tmp_path, stub)
    assert_one_error_line(run, f"{script} requires NeMo 2", NEMO_IMAGE)
    assert BEST in run.stdout
    assert (tmp_path / "stub-record").exists()


# --------------------------------------------------------------------------------------------------------------
# data


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_dataset_preparation(mods: Modules, instruction_dataset: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    dm = mods.data
    config = dm.HFDatasetConfig(dataset_name=str(instruction_dataset),
                                field_mapping={"instruction": "instruction", "input": "input", "output": "output"},
                                num_proc=1)
    data_dir = dm.default_data_dir(config, tmp_path)
    assert data_dir.relative_to(tmp_path).parts[:1] == ("datasets",)
    assert data_dir.parts[-2:] == ("default", "train=90%-val=5%-test=5%")
    assert dm.prepare_dataset_files(config, data_dir, is_global_zero=True) == data_dir
    assert sorted(p.name for p in data_dir.iterdir()) == [".data_ready", "test.jsonl", "training.jsonl",
                                                          "validation.jsonl"]
    assert (data_dir / ".data_ready").read_text() == "ready"
    splits = {name: read_jsonl(data_dir / f"{name}.jsonl") for name in ("training", "validation", "test")}
    assert {k: len(v) for k, v in splits.items()} == {"training": 270, "validation": 15, "test": 15}
    row = splits["training"][0]
    assert sorted(row) == ["input", "output"]
    assert row["input"].startswith("### Instruction:\n") and "\n ### Input:\n" in row["input"]
    assert row["output"].startswith("### Response:\n")
    inputs = [r["input"] for rows in splits.values() for r in rows]
    assert len(set(inputs)) > 100 and not any(p.name.startswith(".") and p.is_dir() for p in data_dir.parent.iterdir())

    again = dataclasses.replace(config, dataset_name=str(tmp_path / "gone"))  # marker present: nothing is loaded
    assert dm.prepare_dataset_files(again, data_dir, is_global_zero=True) == data_dir
    assert read_jsonl(data_dir / "training.jsonl") == splits["training"]

    other = tmp_path / "again"  # the same seed gives the same split
    dm.prepare_dataset_files(config, other, is_global_zero=True)
    assert read_jsonl(other / "test.jsonl") == splits["test"]


def test_dataset_errors_and_waiting_rank(mods: Modules, instruction_dataset: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    dm, error = mods.data, mods.common.ScriptError
    mapped = dm.HFDatasetConfig(dataset_name="x", input_template="Q: {q}\n", output_template="A: {a}",
                                field_mapping={"q": "question", "a": "answer"})
    assert dm.convert_row({"question": None, "answer": 7}, mapped) == {"input": "Q: \n", "output": "A: 7"}
    assert dm.convert_row({"answer": 7}, mapped) == {"input": "Q: \n", "output": "A: 7"}  # missing column: ""
    plain = dm.HFDatasetConfig(dataset_name="x", input_template="{q}", output_template="{a}")
    with pytest.raises(error, match=r"\{a\} but the rows have no such column \(columns: q\)"):
        dm.convert_row({"q": "x"}, plain)
    with pytest.raises(error, match=r"not a valid str\.format template"):
        dm.convert_row({"q": "x"}, dm.HFDatasetConfig(dataset_name="x", input_template="{", output_template=""))
    with pytest.raises(error, match="no such directory"):
        dm.prepare_dataset_files(dm.HFDatasetConfig(dataset_name=str(tmp_path / "nope")), tmp_path / "d", True)
    file_only = dm.HFDatasetConfig(dataset_name=str(instruction_dataset / "data.jsonl"))
    with pytest.raises(error, match="a file is not a dataset"):
        dm.prepare_dataset_files(file_only, tmp_path / "d", True)
    assert dm.HFDatasetConfig.from_value(mapped.to_dict()) == dataclasses.replace(mapped, custom_converter=None)

    waiting = tmp_path / "shared"
    done: list[Path] = []
    polling = threading.Event()
    wait_for = dm.wait_for

    def waits(*args: Any, **kwargs: Any) -> Any:
        polling.set()
        return wait_for(*args, **kwargs)

    monkeypatch.setattr(dm, "wait_for", waits)
    worker = threading.Thread(target=lambda: done.append(
        dm.prepare_dataset_files(plain, waiting, is_global_zero=False, poll=0.05, timeout=10)))
    worker.start()
    assert polling.wait(10), "the other rank never started waiting for the marker"
    assert not done  # it waits until the marker exists (10 s at most)
    waiting.mkdir()
    (waiting / ".data_ready").write_text("ready")
    worker.join(5)
    assert done == [waiting]
    with pytest.raises(error, match="gave up"):
        dm.prepare_dataset_files(plain, tmp_path / "never", is_global_zero=False, poll=0.05, timeout=0.1)


# --------------------------------------------------------------------------------------------------------------
# test_checkpoint's pure parts


def test_evaluation_inputs(mods: Modules, tmp_path: Path) -> None:
    tc = mods.evaluate
    assert [tc.samples_to_load(n, 16) for n in (1024, 1, 16, 17)] == [1024, 16, 16, 32]
    default = tc.parse_args([])
    assert tc.sampling_settings(default) == {"temperature": 0.1, "top_k": 0, "top_p": 0.95,
                                             "num_tokens_to_generate": 512}
    assert tc.sampling_settings(tc.parse_args(["--temperature=0"]))["top_k"] == 1  # greedy
    assert tc.sampling_settings(tc.parse_args(["--top_k=20"]))["top_p"] == 0.0  # Megatron takes one of them

    rows = [{"input": f"q{i}", "output": f"a{i}", "id": i} for i in range(20)]
    old = tmp_path / "datasets" / "old" / "test.jsonl"
    new = tmp_path / "datasets" / "new" / "test.jsonl"
    for path, part in ((old, rows[:2]), (new, rows)):
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    os.utime(old, (time.time() - 100, time.time() - 100))
    assert tc.find_test_file(None, tmp_path) == new  # the newest, not the first
    read = tc.read_test_rows(new, tc.samples_to_load(3, 16))
    assert len(read) == 16 and read[0] == {"input": "q0", "label": "a0", "id": 0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "x"}\nnot json\n')
    with pytest.raises(mods.common.ScriptError, match=r"bad\.jsonl:2: not a JSON line"):
        tc.read_test_rows(bad, 10)
    with pytest.raises(mods.common.ScriptError, match="--test_path=/nope: no such file"):
        tc.find_test_file("/nope")

    assert tc.check_launch(default, {}) == 0
    torchrun = {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8"}
    assert tc.check_launch(default, torchrun) == 3
    with pytest.raises(mods.common.ScriptError, match="torchrun started 8 process"):
        tc.check_launch(tc.parse_args(["--gpus_per_node=4", "--tensor_parallel_size=4"]), torchrun)

    assert mods.common.token_f1("the Red cat", "red cat") == pytest.approx(0.8)
    assert mods.common.rouge_l_f1("a b c", "a c") == pytest.approx(0.8)


def test_metrics_file_lines(mods: Modules, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("MLRECIPE_METRICS_FILE", str(path))
    mods.common.report_progress(10, 100, train_loss=1.5, lr=1e-4, note="x", bad=float("nan"))
    mods.common.report_progress(token_f1=0.5)
    first, second = read_jsonl(path)
    assert (first["step"], first["total"], first["metrics"]) == (10, 100, {"train_loss": 1.5, "lr": 1e-4})
    assert second["metrics"] == {"token_f1": 0.5} and "step" not in second


# --------------------------------------------------------------------------------------------------------------
# with NeMo 2 (`make nemo2-env`, or MLRECIPE_NEMO2_PYTHON)


@pytest.mark.integration
def test_recipe_builds_with_nemo(scripts: Path, tmp_path: Path, instruction_dataset: Path) -> None:
    python = os.environ.get("MLRECIPE_NEMO2_PYTHON") or str(NEMO2_ENV_PYTHON)
    if not Path(python).exists():
        pytest.skip(f"no Python with NeMo 2: {python} is missing (`make nemo2-env` creates it; `make test` does)")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    args = [*recipe_args("fine_tune.py", **{"$MODEL_PATH": str(model)}), f"--hfdc_dataset_name={instruction_dataset}",
            "--enable_speed_monitor"]
    env = script_env(tmp_path, MLRECIPE_NEMO2_DRY_RUN="1", MLRECIPE_METRICS_FILE=str(tmp_path / "m.jsonl"))
    proc = subprocess.run([python, "fine_tune.py", *args], cwd=scripts, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    run = Run(proc.returncode, proc.stdout, proc.stderr, 0.0)
    assert run.returncode == 0, run.describe()
    for needle in ("Qwen3Config14B", "GeneralizedHFDataModule", "global_batch_size=64", "tensor_model_parallel_size=8",
                   "num_nodes=2", "accumulate_grad_batches=1", "SpeedMonitor", "MetricsCallback", "peft=<Config[LoRA",
                   str(tmp_path / "outputs" / "Qwen" / "Qwen3-14B" / "imported_hf_ckpt"), "tokenizer='data'"):
        assert needle in run.stdout, needle
    assert not (tmp_path / "datasets").exists()  # a dry run prepares nothing
