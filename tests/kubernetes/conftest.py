"""Fixtures of the Kubernetes backend's tests."""

from __future__ import annotations

import pytest

from mlrecipe.backends.base import PollClock


@pytest.fixture
def poll_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock every :class:`PollClock` reads: a one-item list of seconds the test moves forward (no sleeping)."""
    ticks = [0.0]
    monkeypatch.setattr(PollClock, "now", staticmethod(lambda: ticks[0]))
    return ticks
