"""The framework scripts' one progress writer: JSON lines to ``$MLRECIPE_METRICS_FILE`` (standard library only).

The contract mlrecipe reads (``mlrecipe.metrics``, which keeps a copy of this writer for users' own scripts because
these scripts ship into images without mlrecipe, and mlrecipe runs without them; ``tests/unit/test_progress_writers.py``
holds the two equal): one JSON object per line, ``{"time": <unix seconds, 3 decimals>, "step": <int>, "total":
<int>, "metrics": {"loss": 4.2, ...}}``. ``step`` is written when given, ``total`` when positive (0 or -1 means
unknown), ``metrics`` when some value is a finite number (a one-element tensor counts by its ``item()``; booleans
do not). Only global rank 0 writes (``$RANK`` unset, empty or ``0``), and only when the variable is set. Writing is
best effort: a failed write prints one warning and never stops a run.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

METRICS_VAR = "MLRECIPE_METRICS_FILE"

__all__ = ["METRICS_VAR", "progress_record", "report_progress"]


def _number(value: Any) -> float | None:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        return None
    return float(value)


def progress_record(step: int | None = None, total: int | None = None, **metrics: Any) -> dict[str, Any]:
    """The line :func:`report_progress` writes, as a dict (``time`` is now)."""
    record: dict[str, Any] = {"time": round(time.time(), 3)}
    if step is not None:
        record["step"] = int(step)
    if total is not None and int(total) > 0:
        record["total"] = int(total)
    numbers = {key: number for key, value in metrics.items() if (number := _number(value)) is not None}
    if numbers:
        record["metrics"] = numbers
    return record


def report_progress(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Append one progress line to ``$MLRECIPE_METRICS_FILE`` (global rank 0 only; nothing when it is unset)."""
    path = os.environ.get(METRICS_VAR)
    if not path or os.environ.get("RANK", "0") not in ("", "0"):
        return
    line = json.dumps(progress_record(step, total, **metrics)) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    except OSError as exc:  # progress is best effort: never stop a training for it
        print(f"warning: cannot write {METRICS_VAR}={path}: {exc}", file=sys.stderr, flush=True)
