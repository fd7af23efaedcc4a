"""Fixtures of the chart tests: the chart catalog, ci scenarios and golden-file handling."""

from __future__ import annotations

import contextlib
import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--update-golden`` rewrites tests/charts/golden/ (review the diff)."""
    with contextlib.suppress(ValueError):  # already registered by tests/conftest.py
        parser.addoption("--update-golden", action="store_true", default=False, help="rewrite golden files")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden files are to be rewritten (flag or MLRECIPE_UPDATE_GOLDEN=1)."""
    return bool(request.config.getoption("--update-golden")) or os.environ.get("MLRECIPE_UPDATE_GOLDEN") == "1"
