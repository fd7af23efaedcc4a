"""A Hugging Face ``TrainerCallback`` that reports progress to mlrecipe (step / max steps and the logged metrics)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from mlrecipe.metrics import report


class MlrecipeCallback(TrainerCallback):
    """Reports ``state.global_step`` / ``state.max_steps`` and every numeric value the Trainer logs."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            report(state.global_step, state.max_steps or None, **(logs or {}))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        every = max(1, int(getattr(args, "logging_steps", 0) or 0) or 10)
        if state.is_world_process_zero and state.global_step % every == 0:
            report(state.global_step, state.max_steps or None)
