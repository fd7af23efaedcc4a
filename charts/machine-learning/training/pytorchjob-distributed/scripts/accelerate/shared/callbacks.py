"""Hugging Face Trainer callbacks used by the accelerate and the ray_train trainers (ray_train links this file as
``shared/trainer_callbacks.py`` and adds its Ray Train callback in ``shared/callbacks.py``).

* :class:`SaveOnBestMetricCallback`: sets ``should_save`` on each evaluation whose ``metric_for_best_model``
  beats ``state.best_metric`` (always on the first one), so checkpoints are written only at evals that improve.
* :class:`MetricsFileCallback`: when ``MLRECIPE_METRICS_FILE`` is set, global rank 0 appends one JSON line per
  logging event: ``{"time": <unix s>, "step": N, "total": M, "metrics": {"loss": 1.23, ...}}`` (the format that
  mlrecipe reads; written with the standard library, mlrecipe itself is not imported).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from transformers import TrainerCallback

METRICS_VAR = "MLRECIPE_METRICS_FILE"


def report_progress(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Append one progress line to ``$MLRECIPE_METRICS_FILE`` (rank 0 only; nothing when the variable is unset)."""
    path = os.environ.get(METRICS_VAR)
    if not path or os.environ.get("RANK", "0") not in ("", "0"):
        return
    record: dict[str, Any] = {"time": round(time.time(), 3)}
    if step is not None:
        record["step"] = int(step)
    if total:
        record["total"] = int(total)
    numbers = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(float(value)):
            numbers[key] = float(value)
    if numbers:
        record["metrics"] = numbers
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError as exc:  # progress is best effort: never stop a training for it
        print(f"warning: cannot write {METRICS_VAR}={path}: {exc}", flush=True)


class SaveOnBestMetricCallback(TrainerCallback):
    """Request a checkpoint whenever the evaluation metric improves on the best seen so far."""

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                    **kwargs: Any) -> Any:
        """Set ``control.should_save`` when ``metrics[metric_for_best_model]`` is a new best (or the first)."""
        name = args.metric_for_best_model or "loss"
        if not name.startswith("eval_"):
            name = f"eval_{name}"
        value = (metrics or {}).get(name)
        if value is None:
            return control
        best = state.best_metric
        if best is None or (value > best if args.greater_is_better else value < best):
            control.should_save = True
        return control


class MetricsFileCallback(TrainerCallback):
    """Report ``global_step`` / ``max_steps`` and the logged numbers to ``$MLRECIPE_METRICS_FILE``."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
        """Write one line per logging event on the main process."""
        if state.is_world_process_zero and os.environ.get(METRICS_VAR):
            report_progress(state.global_step, state.max_steps or None, **(logs or {}))
        return control
