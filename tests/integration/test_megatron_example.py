"""The megatron example end to end on the local backend, on CPU, as a user runs it
(``mlrecipe run examples/frameworks/megatron/pipeline.yaml``): shards made and served over HTTP on 127.0.0.1, data
prepared by 4 Open MPI ranks on 2 nodes into .bin/.idx with a manifest, pretraining on 2 torchrun nodes whose loss
falls, and a held-out perplexity far below an untrained model of the same shape.

On the way, the pretraining step's processes are killed with SIGKILL once its first checkpoint is written; the run
fails, and ``mlrecipe resume`` continues the release: the data steps are not run again, pretraining resumes from the
newest checkpoint and ends at the same step count (one pipeline run covers both, so the suite pays for one). The
resumed release then exports the checkpoint to Hugging Face format, serves it with vLLM (CPU, float32) and its client
step finds greedy completions through the server token-identical to transformers' generate of the export."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import cli, finish, release_processes, start_cli, wait_for
from tests.repo import EXAMPLES

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed here (make test installs it)"),
]
RELEASE = "megatron-gpt"


def _kill_step(home: Path, step: str) -> int:
    """SIGKILL every process of ``step`` (the step runtime, torchrun agents, workers); how many there were."""
    killed = 0
    for proc in release_processes(RELEASE, home):
        try:
            if proc.environ().get("MLRECIPE_STEP") == step:
                proc.send_signal(signal.SIGKILL)
                killed += 1
        except psutil.Error:
            continue
    return killed


def test_megatron_example_prepares_on_mpi_pretrains_on_two_nodes_resumes_after_kill_9_and_beats_an_untrained_model(
        mlhome: Path) -> None:
    for module in ("zstandard", "tokenizers", "torch"):
        pytest.importorskip(module, reason="the megatron example needs the megatron extra (pip install '.[megatron]')")
    fsx = mlhome / "volumes" / "pv-fsx" / RELEASE
    steps = mlhome / "releases" / "local" / "default" / RELEASE / "steps"
    checkpoints = fsx / "results" / "checkpoints"
    try:
        run = start_cli(mlhome, "run", str(EXAMPLES / "frameworks" / "megatron" / "pipeline.yaml"))
        wait_for(lambda: (checkpoints / "latest_checkpointed_iteration.txt").is_file() or run.poll() is not None,
                 300, "pretraining's first checkpoint")
        killed = _kill_step(mlhome, "pretrain")
        out = finish(run, 60)
        assert killed >= 2 and run.returncode != 0, out
        killed_at = int((checkpoints / "latest_checkpointed_iteration.txt").read_text())
        assert 100 <= killed_at < 200, killed_at
        assert "MLRECIPE_SHARDS_URL is set for later steps" in out
        data = fsx / "data"
        manifest_written = (data / "manifest.json").stat().st_mtime_ns
        prep_log = (steps / "data" / "node-0.log").read_text()

        resumed = cli(mlhome, "resume", RELEASE, timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
        for step in ("corpus", "data"):
            assert f"step {step}: skipped" in resumed.stdout, resumed.stdout
        assert (data / "manifest.json").stat().st_mtime_ns == manifest_written
        assert (steps / "data" / "node-0.log").read_text() == prep_log
        train_log = cli(mlhome, "logs", RELEASE, "pretrain").stdout
        assert f"resumed from /fsx/{RELEASE}/results/checkpoints/iter_{killed_at:07d} at step {killed_at}" \
            in train_log, train_log[-3000:]
        assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "200"

        manifest = json.loads((data / "manifest.json").read_text())
        assert [p["prefix"] for p in manifest["prefixes"]] == [f"pile_{n:02d}_text_document" for n in range(4)]
        assert manifest["ranks"] == 4 and manifest["tokens"] > 100_000
        for entry in manifest["prefixes"]:
            assert (data / entry["bin"]["name"]).stat().st_size == entry["bin"]["bytes"]
        assert "every rank succeeded" in prep_log
        rows = [json.loads(line) for line in (steps / "pretrain" / "metrics.jsonl").read_text().splitlines()]
        losses = [r["metrics"]["loss"] for r in rows if "loss" in r.get("metrics", {})]
        assert len(losses) >= 20 and losses[-1] < losses[0] - 0.5, losses
        assert "model: plain-torch GPT" in train_log and "2 data-parallel rank(s) on cpu" in train_log
        assert list((fsx / "results" / "tensorboard").glob("events.out.tfevents.*"))
        figures = json.loads((fsx / "results" / "evaluation.json").read_text())
        assert figures["perplexity"] < 0.5 * figures["untrained_perplexity"], figures
        assert "untrained model of the same shape" in cli(mlhome, "logs", RELEASE, "evaluate").stdout
        assert (fsx / "results" / "hf" / "model.safetensors").is_file()
        assert "as GPT2LMHeadModel; tokenizer from" in cli(mlhome, "logs", RELEASE, "export").stdout
        served = json.loads((fsx / "results" / "served.json").read_text())
        assert served["identical"] and all(row["served"] for row in served["prompts"]), served
        assert "token-identical to transformers' on 4 prompts" in cli(mlhome, "logs", RELEASE, "client").stdout
    finally:
        cli(mlhome, "uninstall", RELEASE)
