"""Shared fixtures: an isolated MLRECIPE_HOME per test and the repository paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BIN = Path(sys.executable).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="write the golden files of the tests that run (the only way golden files are written); review the diff",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True with ``--update-golden``: golden tests write their files (see tests/golden.py)."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def mlhome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``MLRECIPE_HOME`` (state, volumes) for one test."""
    home = tmp_path / "mlhome"
    monkeypatch.setenv("MLRECIPE_HOME", str(home))
    return home


def cli_env(home: Path) -> dict[str, str]:
    """Environment for running the ``mlrecipe`` CLI as a subprocess."""
    env = dict(os.environ)
    env["MLRECIPE_HOME"] = str(home)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.pop("MLRECIPE_RUN_ID", None)
    return env
