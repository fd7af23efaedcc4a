"""Live progress of a step: rank 0 appends JSON lines to ``$MLRECIPE_METRICS_FILE``; mlrecipe reads them.

The contract (standard library only, so scripts may copy it instead of importing mlrecipe): one JSON object
per line, ``{"time": <unix seconds>, "step": <int>, "total": <int>, "metrics": {"loss": 4.2, ...}}``, every
field optional but ``time``. Every backend sets the variable: on the local and Slurm backends a file in the
step's state directory, on Kubernetes a file on the step's shared volume whose tail the backend copies there
from a running pod; ``mlrecipe``'s live display and ``status`` show step / total, rate, ETA and the latest
metrics. :func:`report` writes one line (rank 0 only); the Hugging Face and Lightning callbacks in
:mod:`mlrecipe.integrations` call it. ``step`` is written when given, ``total`` when positive, ``metrics`` when some
value is a finite number (a one-element tensor by its ``item()``; booleans are not numbers); a failed write prints
a warning and never stops a run.

The framework scripts have their own copy of this writer, ``mlrecipe_scripts.core.progress``: they ship into images
where mlrecipe is not installed and the two packages never import each other. ``tests/unit/test_progress_writers.py``
holds both to the same lines for the same calls.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

METRICS_VAR = "MLRECIPE_METRICS_FILE"
METRICS_FILE = "metrics.jsonl"
_TAIL_BYTES = 64 * 1024


def _number(value: Any) -> float | None:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        return None
    return float(value)


def progress_record(step: int | None = None, total: int | None = None, **metrics: Any) -> dict[str, Any]:
    """The line :func:`report` writes, as a dict (``time`` is now)."""
    record: dict[str, Any] = {"time": round(time.time(), 3)}
    if step is not None:
        record["step"] = int(step)
    if total is not None and int(total) > 0:
        record["total"] = int(total)
    numbers = {key: number for key, value in metrics.items() if (number := _number(value)) is not None}
    if numbers:
        record["metrics"] = numbers
    return record


def report(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Append one progress line for this step (only on rank 0, only when ``$MLRECIPE_METRICS_FILE`` is set)."""
    path = os.environ.get(METRICS_VAR)
    if not path or os.environ.get("RANK", "0") not in ("", "0"):
        return
    line = json.dumps(progress_record(step, total, **metrics)) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    except OSError as exc:  # progress is best effort: never stop a training for it
        print(f"warning: cannot write {METRICS_VAR}={path}: {exc}", file=sys.stderr, flush=True)


@dataclass
class Progress:
    """What the last lines of a metrics file say: step / total, rate (steps/s), ETA (s), latest metrics."""

    step: int | None = None
    total: int | None = None
    rate: float | None = None
    eta: float | None = None
    updated: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {})}

    def __str__(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}/{self.total}" if self.total else f"step {self.step}")
        if self.rate:
            parts.append(f"{self.rate:.1f}/s")
        if self.eta is not None:
            minutes, seconds = divmod(int(self.eta), 60)
            parts.append(f"ETA {minutes}:{seconds:02d}")
        parts += [f"{k} {v:.4g}" for k, v in self.metrics.items()]
        return "  ".join(parts)


#: The fields of a progress line and of what mlrecipe derives from them: not metric names.
PROGRESS_FIELDS = ("time", *(f.name for f in fields(Progress) if f.name != "metrics"))


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a partial first line, or a line being written
        if isinstance(record, dict) and isinstance(record.get("time"), int | float):
            out.append(record)
    return out


def read_progress(path: Path | None) -> Progress | None:
    """The progress a metrics file shows (``None`` when there is none yet)."""
    records = _records(path) if path is not None else []
    if not records:
        return None
    last = records[-1]
    progress = Progress(updated=float(last["time"]))
    for record in records:
        progress.metrics.update(record.get("metrics") or {})
        if isinstance(record.get("total"), int):
            progress.total = record["total"]
    stepped = [r for r in records if isinstance(r.get("step"), int)]
    if stepped:
        progress.step = stepped[-1]["step"]
        first = stepped[max(0, len(stepped) - 20)]
        elapsed, done = stepped[-1]["time"] - first["time"], stepped[-1]["step"] - first["step"]
        if elapsed > 0 and done > 0:
            progress.rate = done / elapsed
            if progress.total:
                progress.eta = max(0.0, (progress.total - progress.step) / progress.rate)
    return progress
