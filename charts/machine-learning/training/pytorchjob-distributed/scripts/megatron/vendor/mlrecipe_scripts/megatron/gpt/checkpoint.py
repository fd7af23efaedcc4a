"""Pretraining checkpoints in Megatron's folder names: ``<save>/iter_0000100/`` and the tracker
``<save>/latest_checkpointed_iteration.txt``. The plain-torch path writes ``model_optim_rng.pt`` with this script's own
keys (not Megatron's, not NeMo's; read back by this script and the export only); the megatron-core path writes
megatron-core's distributed checkpoint (``torch_dist``: every rank its shards, ``metadata.json``, ``common.pt``;
:func:`.parallel.save_dist`).

A checkpoint is written to a temporary sibling folder and renamed into place, then the tracker is replaced
atomically; a process killed at any point leaves the previous checkpoint readable. Loading takes the tracker's
iteration, or the newest complete ``iter_*`` folder when the tracker is missing or names a folder that is gone.

Retention (:func:`prune`, after each save): ``keep_last`` newest iterations and the ``keep_best`` with the lowest
validation loss (``validation_loss.txt`` beside the state file, written with it), always with the newest and the
tracker's iteration; a folder is renamed out of the ``iter_*`` names before it is deleted, so a kill mid-deletion
never leaves a partial folder that looks like a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from mlrecipe_scripts.core.script_core import ScriptError

TRACKER = "latest_checkpointed_iteration.txt"
FILE = "model_optim_rng.pt"
VALIDATION = "validation_loss.txt"
ITER = re.compile(r"^iter_(\d{7})$")


def folder(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def save(root: Path, iteration: int, state: dict[str, Any], validation_loss: float | None = None) -> Path:
    """Write ``state`` as the checkpoint of ``iteration`` (rank 0 only), with the validation loss measured at that
    step when there is one, and point the tracker at it."""
    final = folder(root, iteration)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / FILE)
    return commit(root, tmp, iteration, validation_loss)


def commit(root: Path, tmp: Path, iteration: int, validation_loss: float | None = None) -> Path:
    """Move a fully written checkpoint folder ``tmp`` into place as ``iteration``'s and point the tracker at it."""
    final = folder(root, iteration)
    if validation_loss is not None:
        (tmp / VALIDATION).write_text(f"{validation_loss!r}\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    tracker = root / f".{TRACKER}.tmp-{os.getpid()}"
    tracker.write_text(f"{iteration}\n")
    os.replace(tracker, root / TRACKER)
    return final


def is_dist(path: Path) -> bool:
    """Whether ``path`` holds a complete megatron-core distributed checkpoint (``torch_dist``)."""
    try:
        meta = json.loads((path / "metadata.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("sharded_backend") == "torch_dist" and (path / ".metadata").is_file()


def is_complete(path: Path) -> bool:
    """Whether an ``iter_*`` folder holds a complete checkpoint of either layout this script writes."""
    return (path / FILE).is_file() or is_dist(path)


def latest(root: Path) -> int | None:
    """The iteration to resume from, or None when ``root`` holds no complete checkpoint."""
    try:
        named = int((root / TRACKER).read_text().strip())
        if is_complete(folder(root, named)):
            return named
    except (OSError, ValueError):
        pass
    found = complete(root)
    return max(found) if found else None


def complete(root: Path) -> list[int]:
    """The iterations of ``root``'s complete checkpoints, oldest first."""
    return sorted(int(m.group(1)) for p in root.glob("iter_*") if (m := ITER.match(p.name)) and is_complete(p))


def validation_loss(root: Path, iteration: int) -> float | None:
    """The validation loss recorded with a checkpoint, or None."""
    try:
        return float((folder(root, iteration) / VALIDATION).read_text())
    except (OSError, ValueError):
        return None


def retained(root: Path, keep_last: int, keep_best: int) -> set[int]:
    """The iterations :func:`prune` keeps: the newest ``keep_last``, the ``keep_best`` lowest validation losses
    (checkpoints without one are not ranked), the newest, the tracker's; every one when both are 0."""
    found = complete(root)
    if not keep_last and not keep_best:
        return set(found)
    keep = set(found[-keep_last:]) if keep_last else set()
    ranked = sorted((loss, it) for it in found if (loss := validation_loss(root, it)) is not None)
    keep.update(it for _, it in ranked[:keep_best])
    newest = latest(root)
    keep.update(i for i in (found[-1] if found else None, newest) if i is not None)
    return keep


def prune(root: Path, keep_last: int, keep_best: int) -> list[int]:
    """Delete the complete checkpoints :func:`retained` does not keep (rank 0, after a save); the deleted ones."""
    keep = retained(root, keep_last, keep_best)
    gone = [it for it in complete(root) if it not in keep]
    for iteration in gone:
        doomed = root / f".{folder(root, iteration).name}.deleting-{os.getpid()}"
        os.replace(folder(root, iteration), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return gone


def load(root: Path, iteration: int) -> dict[str, Any]:
    """The plain-torch layout's state (ScriptError for a megatron-core distributed checkpoint)."""
    if is_dist(folder(root, iteration)):
        raise ScriptError(f"{folder(root, iteration)}: a megatron-core checkpoint (torch_dist); this reader takes "
                          f"{FILE} only (gpt/export_hf.py's read_checkpoint reads both, as export and evaluate do)")
    return torch.load(folder(root, iteration) / FILE, map_location="cpu", weights_only=False)
