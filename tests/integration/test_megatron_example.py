"""The megatron example end to end on the local backend, on CPU, as a user runs it
(``mlrecipe run examples/frameworks/megatron/pipeline.yaml``): shards made and served over HTTP on 127.0.0.1, data
prepared by 4 Open MPI ranks on 2 nodes into .bin/.idx with a manifest, pretraining on 2 torchrun nodes whose loss
falls, and a held-out perplexity far below an untrained model of the same shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.repo import EXAMPLES

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed here (make test installs it)"),
]


def test_megatron_example_prepares_on_mpi_pretrains_on_two_nodes_and_beats_an_untrained_model(mlhome: Path) -> None:
    for module in ("zstandard", "tokenizers", "torch"):
        pytest.importorskip(module, reason="the megatron example needs the megatron extra (pip install '.[megatron]')")
    try:
        done = cli(mlhome, "run", str(EXAMPLES / "frameworks" / "megatron" / "pipeline.yaml"), timeout=300)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert "MLRECIPE_SHARDS_URL is set for later steps" in done.stdout
        data = mlhome / "volumes" / "pv-fsx" / "megatron-gpt" / "data"
        manifest = json.loads((data / "manifest.json").read_text())
        assert [p["prefix"] for p in manifest["prefixes"]] == [f"pile_{n:02d}_text_document" for n in range(4)]
        assert manifest["ranks"] == 4 and manifest["tokens"] > 100_000
        for entry in manifest["prefixes"]:
            assert (data / entry["bin"]["name"]).stat().st_size == entry["bin"]["bytes"]
        prep = cli(mlhome, "logs", "megatron-gpt", "data").stdout
        assert "every rank succeeded" in prep
        steps = mlhome / "releases" / "local" / "default" / "megatron-gpt" / "steps"
        rows = [json.loads(line) for line in (steps / "pretrain" / "metrics.jsonl").read_text().splitlines()]
        losses = [r["metrics"]["loss"] for r in rows if "loss" in r.get("metrics", {})]
        assert len(losses) >= 20 and losses[-1] < losses[0] - 0.5, losses
        train_log = cli(mlhome, "logs", "megatron-gpt", "pretrain").stdout
        assert "model: plain-torch GPT" in train_log and "2 data-parallel rank(s) on cpu" in train_log
        results = mlhome / "volumes" / "pv-fsx" / "megatron-gpt" / "results"
        assert (results / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "300"
        assert list((results / "tensorboard").glob("events.out.tfevents.*"))
        figures = json.loads((results / "evaluation.json").read_text())
        assert figures["perplexity"] < 0.5 * figures["untrained_perplexity"], figures
        evaluation = cli(mlhome, "logs", "megatron-gpt", "evaluate").stdout
        assert "untrained model of the same shape" in evaluation
    finally:
        cli(mlhome, "uninstall", "megatron-gpt")
