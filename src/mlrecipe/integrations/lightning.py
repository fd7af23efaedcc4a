"""A Lightning ``Callback`` that reports progress to mlrecipe (global step / estimated steps and the metrics)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from mlrecipe.metrics import report


class MlrecipeProgress(Callback):
    """Every ``every_n_steps`` optimizer steps: ``trainer.global_step`` / ``estimated_stepping_batches`` and the
    scalar ``callback_metrics`` (what ``self.log`` recorded)."""

    def __init__(self, every_n_steps: int = 10) -> None:
        self.every_n_steps = max(1, every_n_steps)

    def _report(self, trainer: Any) -> None:
        if not trainer.is_global_zero:
            return
        total = trainer.estimated_stepping_batches
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        report(trainer.global_step, int(total) if total != float("inf") else None, **metrics)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._report(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._report(trainer)
