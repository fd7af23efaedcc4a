"""``gpt/pretrain.py``'s Megatron-LM parallelism and dropout flags: refused on the plain-torch (CPU) path with one
``error:`` line and exit status 2 before anything is written; on the megatron-core path parsed into the layout
(world / (tp x pp) data-parallel replicas), megatron-core's TransformerConfig, DDP and optimizer configs, and a real
megatron-core training step through its schedule on CPU, saved as megatron-core's distributed checkpoint and loaded
back. Checkpoint retention (``--keep-last``, ``--keep-best``):
which folders a prune keeps, and a real CPU run that keeps exactly those and resumes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlrecipe_scripts.core.script_core import ScriptError
from mlrecipe_scripts.megatron.gpt import checkpoint, parallel
from mlrecipe_scripts.megatron.gpt.pretrain import build_parser, check_retention
from tests.frameworks.megatron_pretrain_data import PRETRAIN, REPO, TINY, run_pretrain, script_env, write_dataset

BASE = ["--train-iters", "2", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4"]
REFUSED = [(["--tensor-model-parallel-size", "2"], "--tensor-model-parallel-size 2", 1),
           (["--pipeline-model-parallel-size", "2"], "--pipeline-model-parallel-size 2", 1),
           (["--use-distributed-optimizer"], "--use-distributed-optimizer True", False),
           (["--hidden-dropout", "0.1"], "--hidden-dropout 0.1", 0.0),
           (["--attention-dropout", "0.1"], "--attention-dropout 0.1", 0.0)]


def _refusal(shown: str, default: object) -> str:
    return (f"error: {shown}: needs the megatron-core path (--impl megatron on a GPU); the plain-torch GPT (CPU) "
            f"supports only {default}")


def test_flags_parse_with_megatron_lm_names_and_defaults() -> None:
    args = build_parser().parse_args(BASE)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.use_distributed_optimizer,
            args.hidden_dropout, args.attention_dropout) == (1, 1, False, 0.0, 0.0)
    assert parallel.plain_path_refusal(args) is None
    for flags, shown, default in REFUSED:
        assert parallel.plain_path_refusal(build_parser().parse_args([*BASE, *flags])) == \
            _refusal(shown, default)[len("error: "):]


def test_layout_splits_the_world_and_refuses_sizes_that_do_not_fit() -> None:
    args = build_parser().parse_args([*BASE, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                      "2"])
    assert parallel.layout(16, args) == parallel.Layout(tensor=2, pipeline=2, data=4)
    with pytest.raises(parallel.FlagError) as refused:
        parallel.layout(6, args)
    assert str(refused.value) == ("world size 6 is not divisible by --tensor-model-parallel-size 2 x "
                                  "--pipeline-model-parallel-size 2 = 4")
    with pytest.raises(parallel.FlagError, match="--num-layers 4 is not divisible by --pipeline-model-parallel-size 3"):
        parallel.layout(3, build_parser().parse_args([*BASE, "--pipeline-model-parallel-size", "3"]))
    with pytest.raises(parallel.FlagError, match="--num-attention-heads 4 is not divisible by "
                                                 "--tensor-model-parallel-size 3"):
        parallel.layout(3, build_parser().parse_args([*BASE, "--tensor-model-parallel-size", "3"]))
    with pytest.raises(parallel.FlagError, match=r"--hidden-dropout 1.5: must be in \[0, 1\)"):
        parallel.layout(1, build_parser().parse_args([*BASE, "--hidden-dropout", "1.5"]))


def test_megatron_core_configs_carry_the_flags() -> None:
    pytest.importorskip("megatron.core", reason="megatron-core is in the megatron extra")
    import torch

    from mlrecipe_scripts.megatron.gpt.model import Shape, megatron_config

    args = build_parser().parse_args([*BASE, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                      "2", "--use-distributed-optimizer", "--hidden-dropout", "0.1",
                                      "--attention-dropout", "0.05", "--bf16", "--lr", "1.6e-4", "--weight-decay",
                                      "0.1"])
    config = megatron_config(Shape(4, 64, 4, 32, 128), args.bf16, args.tensor_model_parallel_size,
                             args.pipeline_model_parallel_size, args.hidden_dropout, args.attention_dropout)
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size) == (2, 2)
    assert (config.hidden_dropout, config.attention_dropout) == (0.1, 0.05)
    assert config.params_dtype == config.pipeline_dtype == torch.bfloat16
    assert parallel.ddp_config(args).use_distributed_optimizer is True
    optimizer = parallel.optimizer_config(args)
    assert (optimizer.use_distributed_optimizer, optimizer.lr, optimizer.weight_decay, optimizer.bf16) == \
        (True, 1.6e-4, 0.1, True)


@pytest.mark.integration
@pytest.mark.parametrize(("flags", "shown", "default"), REFUSED, ids=[r[1].split()[0] for r in REFUSED])
def test_plain_torch_path_refuses_megatron_only_flags(tmp_path: Path, flags: list[str], shown: str,
                                                      default: object) -> None:
    manifest = write_dataset(tmp_path / "data", (0,))
    metrics = tmp_path / "metrics.jsonl"
    done = run_pretrain(["--data-manifest", str(manifest), "--save", str(tmp_path / "ckpt"), "--tensorboard-dir",
                         str(tmp_path / "tb"), *TINY, "--train-iters", "2", *flags], metrics=metrics)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [_refusal(shown, default)]
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"], "nothing written"


@pytest.mark.integration
def test_megatron_core_trainer_steps_through_its_schedule_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core", reason="megatron-core is in the megatron extra")
    out = tmp_path / "trainer.json"
    done = subprocess.run([sys.executable, "-m", "tests.frameworks.megatron_core_cpu_train", str(out),
                           "--hidden-dropout", "0.1", "--attention-dropout", "0.05"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=script_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["hidden_dropout"], result["attention_dropout"], result["tp"], result["pp"], result["dp"]) == \
        (0.1, 0.05, 1, 1, 1)
    assert result["model"] == "DistributedDataParallel" and result["inner"] == ["FP32Optimizer"]
    losses = result["losses"]
    assert losses[-1] < losses[0] - 0.3, losses
    assert 0 < result["valid"] < losses[0]
    folder = Path(result["folder"])
    assert folder == tmp_path / "ckpt" / "iter_0000004" and checkpoint.is_dist(folder)
    assert checkpoint.latest(tmp_path / "ckpt") == 4
    assert checkpoint.validation_loss(tmp_path / "ckpt", 4) == result["valid"]
    resumed = result["resumed"]
    assert resumed["differ_before"] and resumed["parameters_equal"] and resumed["optimizer_equal"], resumed
    assert (resumed["iteration"], resumed["valid"]) == (4, result["valid"])
    with pytest.raises(ScriptError, match=r"a megatron-core checkpoint \(torch_dist\); this reader takes"):
        checkpoint.load(tmp_path / "ckpt", 4)
    exported = subprocess.run([sys.executable, str(PRETRAIN.with_name("export_hf.py")), "--load",
                               str(tmp_path / "ckpt"), "--output", str(tmp_path / "hf")], capture_output=True,
                              text=True, timeout=300, env=script_env())
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    assert "(megatron, 2 layers x 64, vocabulary 64)" in exported.stdout


def test_prune_keeps_the_newest_the_best_and_the_trackers_iteration(tmp_path: Path) -> None:
    losses = {2: 1.0, 4: 3.0, 6: 0.5, 8: 2.0, 10: None, 12: 4.0}
    for iteration, loss in losses.items():
        checkpoint.save(tmp_path, iteration, {"iteration": iteration}, loss)
    (tmp_path / "iter_0000014").mkdir()  # an unfinished save: not a checkpoint, never touched
    assert checkpoint.retained(tmp_path, 0, 0) == set(losses)
    assert checkpoint.retained(tmp_path, 2, 0) == {10, 12}
    assert checkpoint.retained(tmp_path, 0, 2) == {6, 2, 12}
    assert checkpoint.retained(tmp_path, 1, 1) == {6, 12}
    (tmp_path / checkpoint.TRACKER).write_text("8\n")  # the tracker names an older complete checkpoint
    assert checkpoint.retained(tmp_path, 1, 1) == {6, 8, 12}
    assert checkpoint.prune(tmp_path, 1, 1) == [2, 4, 10]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "iter_0000006", "iter_0000008", "iter_0000012", "iter_0000014", checkpoint.TRACKER]
    assert checkpoint.latest(tmp_path) == 8 and checkpoint.load(tmp_path, 6) == {"iteration": 6}


def test_retention_flags_are_checked() -> None:
    def refusal(*flags: str) -> str:
        with pytest.raises(parallel.FlagError) as refused:
            check_retention(build_parser().parse_args([*BASE, *flags]))
        return str(refused.value)

    assert refusal("--keep-last", "-1") == "--keep-last -1: must be 0 (keep every checkpoint) or positive"
    assert refusal("--keep-best", "2", "--save-interval", "4", "--eval-interval", "3") == (
        "--keep-best 2: every save needs a validation: --save-interval 4 must be a multiple of --eval-interval 3")
    assert refusal("--keep-best", "2", "--save-interval", "4") == (
        "--keep-best 2: every save needs a validation: --save-interval 4 must be a multiple of --eval-interval 0")
    assert refusal("--keep-best", "1", "--split", "100,0,0") == (
        "--keep-best 1: --split 100,0,0 leaves no validation data")
    check_retention(build_parser().parse_args([*BASE, "--keep-best", "2", "--save-interval", "4", "--eval-interval",
                                               "2", "--keep-last", "1"]))


def _saved(save: Path) -> list[str]:
    return sorted(p.name for p in save.iterdir() if p.name.startswith(("iter_", ".iter_")))


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_keeps_the_last_and_best_checkpoints_and_resumes(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path / "data", (0, 1), documents=80)
    save, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    args = ["--data-manifest", str(manifest), "--save", str(save), "--save-interval", "2", "--eval-interval", "2",
            "--split", "80,20,0", "--eval-iters", "1", *TINY, "--keep-last", "1", "--keep-best", "2"]
    done = run_pretrain([*args, "--train-iters", "12"], metrics)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    val = {r["step"]: r["metrics"]["val_loss"] for r in rows if "val_loss" in r["metrics"]}
    assert sorted(val) == [2, 4, 6, 8, 10, 12]
    best = sorted(val, key=lambda step: val[step])[:2]
    assert _saved(save) == sorted(f"iter_{i:07d}" for i in {12, *best})
    for step in {12, *best}:
        assert checkpoint.validation_loss(save, step) == pytest.approx(val[step], rel=1e-9)
    assert "removed checkpoint(s) iter_" in done.stdout

    resumed = run_pretrain([*args, "--train-iters", "16", "--keep-best", "0"], metrics)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resumed from {save / 'iter_0000012'} at step 12" in resumed.stdout
    assert _saved(save) == ["iter_0000016"]
    assert checkpoint.latest(save) == 16
