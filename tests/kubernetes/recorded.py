"""Recorded API responses under ``fixtures/`` (PyTorchJob, Job, RayJob objects and PodLists as
``kubectl get -o json`` returns them): no API server runs in this test environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    """The recorded object ``fixtures/<name>.json``."""
    return json.loads((FIXTURES / f"{name}.json").read_text())
