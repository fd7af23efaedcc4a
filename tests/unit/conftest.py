"""Fixtures of the unit tests: the fake backend of ``tests/unit/fake_backend.py``, registered as ``fake``."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends import registry
from tests.unit.fake_backend import WORLD


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch, mlhome: Path) -> None:
    """The fake backend registered as ``fake``, its world empty, the runner ticking fast."""
    WORLD.reset()
    monkeypatch.setitem(registry.BACKENDS, "fake", "tests.unit.fake_backend:FakeBackend")
    monkeypatch.setattr("mlrecipe.runner.release.TICK_SECONDS", 0.001)
