"""``gpt/pretrain.py`` of the megatron framework: its data contract (blend, manifest, splits), its schedule, and
real runs of the chart tree's script: a 2-rank gloo training that writes metrics, TensorBoard events and
checkpoints, is killed with SIGKILL and resumes from its newest checkpoint; megatron-core's GPTDataset path; the
evaluator's held-out perplexity against an untrained model."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mlrecipe_scripts.core.script_core import ScriptError
from mlrecipe_scripts.megatron.gpt import checkpoint
from mlrecipe_scripts.megatron.gpt.blend import parse_data_path, read_manifest
from mlrecipe_scripts.megatron.gpt.pretrain import build_parser, learning_rate
from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, blend_order, parse_split, split_tokens
from tests.frameworks.megatron_pretrain_data import PRETRAIN, TINY, run_pretrain, script_env, torchrun, write_dataset


def _losses(metrics: Path) -> list[float]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r["metrics"]["loss"] for r in rows if "loss" in r.get("metrics", {})]


def test_manifest_gives_every_prefix_weighted_by_tokens(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, (0, 3))
    blend = read_manifest(str(manifest))
    data = json.loads(manifest.read_text())
    assert blend.prefixes == (str(tmp_path / "pile_00_text_document"), str(tmp_path / "pile_03_text_document"))
    tokens = [p["tokens"] for p in data["prefixes"]]
    assert blend.weights == pytest.approx([t / sum(tokens) for t in tokens])
    assert (blend.vocab_size, blend.eod_id) == (64, 0)


def test_missing_or_partial_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="no manifest"):
        read_manifest(str(tmp_path / "manifest.json"))
    manifest = write_dataset(tmp_path, (0, 1))
    (tmp_path / "pile_01_text_document.idx").unlink()
    with pytest.raises(ScriptError, match=r"partial data: pile_01_text_document\.idx is missing"):
        read_manifest(str(manifest))
    write_dataset(tmp_path, (0, 1))
    with (tmp_path / "pile_00_text_document.bin").open("ab") as fh:
        fh.truncate(10)
    with pytest.raises(ScriptError, match=r"pile_00_text_document\.bin has 10 bytes"):
        read_manifest(str(manifest))


def test_data_path_blend_parses_like_megatron(tmp_path: Path) -> None:
    write_dataset(tmp_path, (0, 1))
    blend = parse_data_path(["0.3", "pile_00_text_document", "0.9", "pile_01_text_document"], str(tmp_path))
    assert blend.weights == pytest.approx([0.25, 0.75])
    assert parse_data_path([str(tmp_path / "pile_00_text_document")]).weights == (1.0,)
    for words, message in ((["0.5", "pile_00_text_document", "0.5"], "weight/prefix pairs"),
                           (["x", "pile_00_text_document", "1", "pile_01_text_document"], "'x' is not a weight"),
                           (["1", "pile_07_text_document"], "pile_07_text_document.bin does not exist")):
        with pytest.raises(ScriptError, match=message):
            parse_data_path(words, str(tmp_path))


def test_splits_partition_the_documents_and_blend_follows_weights(tmp_path: Path) -> None:
    write_dataset(tmp_path, (0,), documents=100)
    prefix = str(tmp_path / "pile_00_text_document")
    parts = [split_tokens(prefix, parse_split("80,10,10"), which) for which in ("train", "valid", "test")]
    whole = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    assert np.array_equal(np.concatenate(parts), whole), "train, valid and test are the documents in order, once"
    assert all(len(p) for p in parts)
    assert parse_split("98,1,1") == pytest.approx((0.98, 0.01, 0.01))
    chosen, within = blend_order((0.25, 0.75), 400)
    assert np.bincount(chosen).tolist() == [100, 300]
    assert within[chosen == 1].tolist() == list(range(300)), "each dataset's samples in order, none skipped"
    samples = BlendedSamples((prefix,), (1.0,), parse_split("80,10,10"), "train", 32, 7, 20)
    batch = samples.batch(0, 20)
    assert batch.shape == (20, 33) and samples.distinct >= 20
    again = BlendedSamples((prefix,), (1.0,), parse_split("80,10,10"), "train", 32, 7, 20).batch(0, 20)
    other = BlendedSamples((prefix,), (1.0,), parse_split("80,10,10"), "train", 32, 8, 20).batch(0, 20)
    assert np.array_equal(batch, again) and not np.array_equal(batch, other), "the order is a function of the seed"


def test_learning_rate_schedule_warms_up_and_decays_to_min_lr() -> None:
    args = build_parser().parse_args(["--train-iters", "100", "--lr", "1.0", "--min-lr", "0.1",
                                      "--lr-warmup-iters", "10", "--lr-decay-style", "cosine", "--data-path", "x"])
    rates = [learning_rate(args, s) for s in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[10:]))
    assert rates[-1] == pytest.approx(0.1, abs=1e-3)
    linear = argparse.Namespace(**{**vars(args), "lr_decay_style": "linear"})
    assert learning_rate(linear, 55) == pytest.approx(0.55)


def test_checkpoint_tracker_falls_back_to_the_newest_complete_folder(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 10, {"x": 1})
    checkpoint.save(tmp_path, 20, {"x": 2})
    assert checkpoint.latest(tmp_path) == 20
    (tmp_path / checkpoint.TRACKER).write_text("30\n")  # names a checkpoint that never finished
    (tmp_path / "iter_0000030").mkdir()
    assert checkpoint.latest(tmp_path) == 20
    assert checkpoint.load(tmp_path, 20) == {"x": 2}


@pytest.mark.integration
def test_missing_manifest_is_one_error_line(tmp_path: Path) -> None:
    done = run_pretrain(["--data-manifest", str(tmp_path / "manifest.json"), "--train-iters", "5"])
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {tmp_path / 'manifest.json'}: no manifest (the data preparation did not finish, or "
                      "wrote elsewhere)"], done.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_two_rank_pretraining_is_killed_and_resumes_from_its_newest_checkpoint(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path / "data", (0, 1), documents=120)
    save, metrics, tb = tmp_path / "ckpt", tmp_path / "metrics.jsonl", tmp_path / "tb"
    args = ["--data-manifest", str(manifest), "--train-iters", "150", "--global-batch-size", "8", "--save", str(save),
            "--save-interval", "10", "--eval-interval", "30", "--tensorboard-dir", str(tb), "--split", "90,5,5",
            *TINY]
    proc = subprocess.Popen([*torchrun(2), str(PRETRAIN), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=script_env(metrics), start_new_session=True)
    deadline = time.monotonic() + 180
    while checkpoint.latest(save) is None or checkpoint.latest(save) < 20:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.2)
    import psutil

    ranks = psutil.Process(proc.pid).children(recursive=True)
    for pid in [proc.pid, *(r.pid for r in ranks)]:  # the launcher and both ranks, each in its own session
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, alive
    killed_at = checkpoint.latest(save)
    assert killed_at is not None and 20 <= killed_at < 150
    done = run_pretrain(args, metrics, nproc=2)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"resumed from {save / f'iter_{killed_at:07d}'} at step {killed_at}" in done.stdout
    assert "model: plain-torch GPT" in done.stdout and "2 data-parallel rank(s) on cpu" in done.stdout
    assert checkpoint.latest(save) == 150
    losses = _losses(metrics)
    assert losses[-1] < losses[0] - 1.0, losses
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {"time", "step", "total", "metrics"} <= set(rows[0]) and rows[-1]["total"] == 150
    assert any("val_loss" in r["metrics"] for r in rows)
    assert list(tb.glob("events.out.tfevents.*")), "TensorBoard events"
    evaluated = subprocess.run([sys.executable, str(PRETRAIN.with_name("evaluate.py")), "--load", str(save),
                                "--batches", "2", "--micro-batch-size", "4", "--output", str(tmp_path / "eval.json")],
                               capture_output=True, text=True, timeout=120, env=script_env())
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    figures = json.loads((tmp_path / "eval.json").read_text())
    assert figures["perplexity"] < 0.5 * figures["untrained_perplexity"], figures
    assert "untrained model of the same shape" in evaluated.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_megatron_core_gpt_dataset_feeds_the_training(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core", reason="megatron-core is in the megatron extra")
    write_dataset(tmp_path / "data", (0, 1), documents=120)
    done = run_pretrain(["--data-path", "0.5", "pile_00_text_document", "0.5", "pile_01_text_document", "--data-dir",
                         str(tmp_path / "data"), "--dataset", "megatron", "--vocab-size", "64", "--train-iters", "10",
                         "--save", str(tmp_path / "ckpt"), "--split", "90,5,5", *TINY])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "dataset: megatron-core GPTDataset" in done.stdout
    assert list((tmp_path / "ckpt" / "data-cache").rglob("*.npy")), "megatron-core's sample index cache"
    assert checkpoint.latest(tmp_path / "ckpt") == 10
