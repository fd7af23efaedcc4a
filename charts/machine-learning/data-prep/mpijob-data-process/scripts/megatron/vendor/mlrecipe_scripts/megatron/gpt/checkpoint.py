"""Pretraining checkpoints in Megatron's folder names: ``<save>/iter_0000100/model_optim_rng.pt`` and the tracker
``<save>/latest_checkpointed_iteration.txt``; the file's keys are this script's own (not megatron-core's distributed
checkpoint, not NeMo's), read back by this script only.

A checkpoint is written to a temporary sibling folder and renamed into place, then the tracker is replaced
atomically; a process killed at any point leaves the previous checkpoint readable. Loading takes the tracker's
iteration, or the newest complete ``iter_*`` folder when the tracker is missing or names a folder that is gone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

TRACKER = "latest_checkpointed_iteration.txt"
FILE = "model_optim_rng.pt"
ITER = re.compile(r"^iter_(\d{7})$")


def folder(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def save(root: Path, iteration: int, state: dict[str, Any]) -> Path:
    """Write ``state`` as the checkpoint of ``iteration`` (rank 0 only) and point the tracker at it."""
    final = folder(root, iteration)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / FILE)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    tracker = root / f".{TRACKER}.tmp-{os.getpid()}"
    tracker.write_text(f"{iteration}\n")
    os.replace(tracker, root / TRACKER)
    return final


def latest(root: Path) -> int | None:
    """The iteration to resume from, or None when ``root`` holds no complete checkpoint."""
    try:
        named = int((root / TRACKER).read_text().strip())
        if (folder(root, named) / FILE).is_file():
            return named
    except (OSError, ValueError):
        pass
    found = [int(m.group(1)) for p in root.glob("iter_*") if (m := ITER.match(p.name)) and (p / FILE).is_file()]
    return max(found) if found else None


def load(root: Path, iteration: int) -> dict[str, Any]:
    return torch.load(folder(root, iteration) / FILE, map_location="cpu", weights_only=False)
