"""Live progress through the runner, and the Hugging Face and Lightning callbacks that write it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mlrecipe.metrics import METRICS_VAR, read_progress
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration

SCRIPT = """
import json, os, time
for step in (1, 2, 3):
    time.sleep(0.6)
    with open(os.environ["MLRECIPE_METRICS_FILE"], "a") as fh:
        fh.write(json.dumps({"time": time.time(), "step": step, "total": 3, "metrics": {"loss": 4.0 - step}}) + "\\n")
"""


def test_a_step_reports_progress_to_the_display_and_status(mlhome: Path, tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(SCRIPT)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"pvc: []\nprocess:\n  command: [python3, {tmp_path / 'work.py'}]\n")
    run = subprocess.run([str(BIN / "mlrecipe"), "install", "prog", "data-prep/data-process", "-f", str(recipe)],
                         capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "    data-process: step " in run.stdout and "/3" in run.stdout
    status = subprocess.run([str(BIN / "mlrecipe"), "status", "prog", "-o", "json"], capture_output=True, text=True,
                            env=cli_env(mlhome), timeout=60)
    (step,) = json.loads(status.stdout)[0]["steps"]
    assert step["progress"]["step"] == 3 and step["progress"]["total"] == 3
    assert step["progress"]["metrics"] == {"loss": 1.0} and step["progress"]["rate"] > 0
    text = subprocess.run([str(BIN / "mlrecipe"), "status", "prog"], capture_output=True, text=True,
                          env=cli_env(mlhome), timeout=60).stdout
    assert "[step 3/3" in text and "loss 1" in text


def test_hugging_face_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import Trainer, TrainingArguments

    from mlrecipe.integrations.transformers import MlrecipeCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.linear(x), y)}

    data = [{"x": torch.randn(4), "y": torch.randn(1)} for _ in range(64)]
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(METRICS_VAR, str(path))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=20, per_device_train_batch_size=4,
                             logging_steps=5, report_to=[], save_strategy="no", use_cpu=True)
    Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[MlrecipeCallback()]).train()
    progress = read_progress(path)
    assert progress is not None and progress.step == 20 and progress.total == 20
    assert "loss" in progress.metrics


def test_lightning_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch as pl
    import torch

    from mlrecipe.integrations.lightning import MlrecipeProgress

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(self.linear(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(METRICS_VAR, str(path))
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                         callbacks=[MlrecipeProgress(every_n_steps=4)])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    progress = read_progress(path)
    assert progress is not None and progress.step == 16 and progress.total == 16
    assert "train_loss" in progress.metrics
    assert os.path.getsize(path) > 0
