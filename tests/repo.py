"""Where the checkout, its examples and this environment's CLI are, and the environment the CLI runs in."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BIN = Path(sys.executable).parent


def cli_env(home: Path) -> dict[str, str]:
    """Environment for running the ``mlrecipe`` CLI as a subprocess."""
    env = dict(os.environ)
    env["MLRECIPE_HOME"] = str(home)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.pop("MLRECIPE_RUN_ID", None)
    return env


def private_tmp() -> str:
    """A short temporary directory of its own (``/tmp/mlrecipe-test-XXXXXXXX``) for a process a test starts without
    mlrecipe (torchrun, accelerate, vLLM's server) as its ``TMPDIR``: their Unix sockets and ``torchelastic_*``
    directories go there and go with it (:func:`remove_private_tmp`), as mlrecipe's step runtime does for a node."""
    return tempfile.mkdtemp(prefix="mlrecipe-test-")


def remove_private_tmp(path: str) -> None:
    """Remove a :func:`private_tmp` directory and what its process left in it."""
    if path:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def private_tmp_env(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``env`` with ``TMPDIR`` at a :func:`private_tmp` directory, removed when the block ends."""
    path = private_tmp()
    try:
        yield {**env, "TMPDIR": path}
    finally:
        remove_private_tmp(path)
