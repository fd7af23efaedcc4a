"""The innermost helpers of every framework tree's scripts (standard library only).

One file for all four trees: the accelerate tree has it here (``shared/script_core.py``); ray_train links
``shared/script_core.py``, pytorch_lightning and nemo2 link ``script_core.py`` (top level) to it. Each tree's common
module (``shared/common_base.py``, ``script_common.py``) re-exports these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "ScriptError", "atomic_dir", "atomic_file", "field_default", "local_only", "log", "offline_defaults", "run_main",
    "short_error",
]


class ScriptError(Exception):
    """Bad input (a flag value, a missing path, no NeMo): reported as one ``error:`` line on stderr, exit status 1."""


def run_main(main: Callable[[], int | None]) -> None:
    """Run ``main``; a :class:`ScriptError` becomes one stderr line and exit status 1."""
    try:
        code = main()
    except ScriptError as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    release_process_group()
    sys.exit(code or 0)


def release_process_group() -> None:
    """Destroy this process's ``torch.distributed`` group, if it has one, before it exits: left to the interpreter's
    teardown, a rank may abort there ("terminate called without an active exception") after a successful run."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def log(message: str) -> None:
    """Write one progress line to stdout, flushed (so that ``tee`` shows it at once).

    ``sys.stdout.write`` rather than ``print``: Ray Train workers patch ``print`` into a logger that would show
    the line twice in the driver's log.
    """
    sys.stdout.write(f"{message}\n")
    sys.stdout.flush()


def short_error(exc: BaseException) -> str:
    """The exception's type and first line (for one-line error messages)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def offline_defaults() -> None:
    """Never download unless asked: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` default to 1 (set 0 to allow).

    Must run before ``huggingface_hub`` is imported (it reads the variables once).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")


def local_only() -> bool:
    """True unless ``HF_HUB_OFFLINE`` is 0/false."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``; on success it replaces ``final``, on failure it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


@contextlib.contextmanager
def atomic_file(final: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; on success it is renamed onto ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)


def field_default(f: dataclasses.Field) -> Any:
    """A field's default (``dataclasses.MISSING`` when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING
