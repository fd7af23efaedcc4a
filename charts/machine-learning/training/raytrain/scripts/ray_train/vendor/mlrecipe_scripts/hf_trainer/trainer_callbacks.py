"""Hugging Face Trainer callbacks used by the accelerate and the ray_train trainers (ray_train links this file as
``shared/trainer_callbacks.py`` and adds its Ray Train callback in ``shared/callbacks.py``).

* :class:`SaveOnBestMetricCallback`: sets ``should_save`` on each evaluation whose ``metric_for_best_model``
  beats ``state.best_metric`` (always on the first one), so checkpoints are written only at evals that improve.
* :class:`MetricsFileCallback`: when ``MLRECIPE_METRICS_FILE`` is set, global rank 0 appends one JSON line per
  logging event: ``{"time": <unix s>, "step": N, "total": M, "metrics": {"loss": 1.23, ...}}``, through the
  scripts' one progress writer (:func:`mlrecipe_scripts.core.progress.report_progress`, re-exported here).
* :class:`CountParametersOnce`: a Trainer mixin; the Trainer's FLOs estimate (``total_flos``) counts the model's
  parameters once instead of at every optimizer step (``Trainer.floating_point_ops`` walks every parameter of the
  model each step: 1-4 % of the step time of a tiny model on CPU, in ``benchmarks/bench_accelerate_sft.py``);
  :func:`script_trainer_class` is ``transformers.Trainer`` with it mixed in, the Trainer class the scripts build.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from transformers import TrainerCallback

from mlrecipe_scripts.core.progress import METRICS_VAR, report_progress


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


class CountParametersOnce:
    """Mixin for a ``transformers.Trainer`` subclass (put it first): the same ``floating_point_ops`` as the
    Trainer's (6 x tokens x non-embedding parameters), with the parameter count taken at the first step only.

    The count does not change during training (LoRA adapters and frozen weights are fixed when the Trainer is
    built), so ``total_flos`` is the same as the Trainer's own.
    """

    _non_embedding_parameters: int | None = None

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """FLOs of one forward + backward pass over ``inputs``."""
        model = self.model  # type: ignore[attr-defined]
        main_input = getattr(model, "main_input_name", "input_ids")
        if main_input not in inputs or not hasattr(model, "num_parameters"):
            return 0
        if self._non_embedding_parameters is None:
            self._non_embedding_parameters = int(model.num_parameters(exclude_embeddings=True))
        return 6 * inputs[main_input].numel() * self._non_embedding_parameters


@functools.cache
def script_trainer_class() -> type:
    """``transformers.Trainer`` with :class:`CountParametersOnce` mixed in (the class is built on first use)."""
    from transformers import Trainer

    class ScriptTrainer(CountParametersOnce, Trainer):
        """transformers' Trainer, counting the parameters for its FLOs estimate once."""

    return ScriptTrainer


def step_callbacks(args: Any, evaluate: bool) -> list[Any]:
    """:class:`MetricsFileCallback`; with validation rows (``evaluate``) also early stopping
    (``--early_stopping_patience``, ``--early_stopping_threshold``) and :class:`SaveOnBestMetricCallback`."""
    from transformers import EarlyStoppingCallback

    callbacks: list[Any] = [MetricsFileCallback()]
    if evaluate:
        callbacks += [EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience,
                                            early_stopping_threshold=args.early_stopping_threshold),
                      SaveOnBestMetricCallback()]
    return callbacks
