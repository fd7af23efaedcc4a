"""The framework examples run end to end on the local backend, on CPU, as a user runs them
(``mlrecipe run examples/frameworks/<framework>/pipeline.yaml``), and what they write proves the work was done:
the loss went down, the converted model differs from the base and reloads, the evaluation computed its metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _losses(metrics: Path) -> list[float]:
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r["metrics"]["loss"] for r in records if "loss" in r.get("metrics", {})]


def test_accelerate_example_fine_tunes_converts_and_evaluates(mlhome: Path) -> None:
    pytest.importorskip("peft", reason="the accelerate scripts need the frameworks extra (pip install '.[frameworks]')")
    import torch
    from transformers import AutoModelForCausalLM

    done = cli(mlhome, "run", str(EXAMPLES / "frameworks" / "accelerate" / "pipeline.yaml"), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bound at /etc/framework-scripts" in done.stdout
    steps = mlhome / "releases" / "local" / "default" / "accelerate-sft" / "steps"
    losses = _losses(steps / "fine-tune" / "metrics.jsonl")
    assert len(losses) >= 10 and losses[-1] < losses[0] - 0.5, losses
    results = mlhome / "volumes" / "pv-efs" / "home" / "accelerate-sft" / "results" / "tiny" / "qwen3"
    (converted,) = results.glob("checkpoint-*.hf_model")
    base = AutoModelForCausalLM.from_pretrained(mlhome / "volumes" / "pv-fsx" / "pretrained-models" / "tiny" /
                                                "qwen3").state_dict()
    tuned = AutoModelForCausalLM.from_pretrained(converted).state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(base[key], tuned[key]), "the LoRA update is merged into the converted model"
    evaluation = json.loads((Path(str(converted).removesuffix(".hf_model")) / "evaluation.json").read_text())
    assert 10 <= evaluation["samples"] <= 16 and evaluation["metric"]  # the 5 % test split, at most --max_samples
    assert all(0.0 <= v <= 1.0 for v in evaluation["scores"].values()) and max(evaluation["scores"].values()) > 0
    log = cli(mlhome, "logs", "accelerate-sft", "evaluate").stdout
    assert "generator: transformers" in log or "generator: vllm" in log
