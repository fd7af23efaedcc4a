"""Where the checkout, its examples and this environment's CLI are, and the environment the CLI runs in."""

from __future__ import annotations

import os
import sys
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
