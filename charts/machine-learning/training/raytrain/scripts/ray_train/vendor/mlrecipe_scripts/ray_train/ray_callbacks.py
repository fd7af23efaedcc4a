"""Hugging Face Trainer callbacks used by the ray_train trainers (run inside the Ray Train workers).

* :class:`SaveOnBestMetricCallback`, :class:`MetricsFileCallback`, :func:`report_progress`,
  :func:`script_trainer_class`: the accelerate trainers' callbacks and Trainer class
  (``shared/trainer_callbacks.py``, a link to the accelerate tree's ``shared/callbacks.py``).
* :class:`RayCheckpointReportCallback`: after each Trainer save, reports the metrics logged so far to Ray Train;
  world rank 0 also hands over the checkpoint just written (``<output_dir>/checkpoint-<step>``), which Ray Train
  persists as ``<storage>/<run name>/checkpoint_<step>/checkpoint/``. Every worker reports (``ray.train.report``
  is a barrier), but only rank 0 reads the checkpoint files, so the other ranks never copy a directory that rank 0
  is still writing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from mlrecipe_scripts.hf_trainer.trainer_callbacks import (
    METRICS_VAR,
    MetricsFileCallback,
    SaveOnBestMetricCallback,
    report_progress,
    script_trainer_class,
)

__all__ = ["METRICS_VAR", "MetricsFileCallback", "RayCheckpointReportCallback", "SaveOnBestMetricCallback",
           "report_progress", "script_trainer_class"]


def _plain_metrics(state: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for entry in state.log_history:
        metrics.update({k: v for k, v in entry.items() if isinstance(v, int | float | str)})
    metrics["step"] = int(state.global_step)
    return metrics


class RayCheckpointReportCallback(TrainerCallback):
    """Persist each Trainer checkpoint as a Ray Train checkpoint (HF files under ``checkpoint/``)."""

    CHECKPOINT_NAME = "checkpoint"

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Report to Ray Train on every worker; rank 0 attaches ``<output_dir>/checkpoint-<global_step>``."""
        import ray.train

        metrics = _plain_metrics(state)
        source = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        rank = ray.train.get_context().get_world_rank()
        name = f"checkpoint_{state.global_step:06d}"
        if rank != 0 or not source.is_dir():
            if rank == 0:
                print(f"warning: {source} was not written; reporting step {state.global_step} without a "
                      "checkpoint", flush=True)
            ray.train.report(metrics=metrics, checkpoint=None)
            return control
        with tempfile.TemporaryDirectory(prefix="ray-ckpt-") as tmp:
            shutil.copytree(source, Path(tmp) / self.CHECKPOINT_NAME)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics=metrics, checkpoint=checkpoint, checkpoint_dir_name=name)
        return control
