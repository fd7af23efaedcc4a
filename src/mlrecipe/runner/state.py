"""The state record of one release, persisted as JSON and replaced atomically on every change."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mlrecipe.backends.base import StepState
from mlrecipe.config import mlrecipe_home, release_dir

STATE_FILE = "state.json"


@dataclass
class StepRecord:
    """What is known of one step of a release."""

    name: str
    chart: str
    state: StepState = StepState.PENDING
    hash: str = ""
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    message: str = ""
    handle: dict[str, Any] = field(default_factory=dict)  #: the backend's typed handle, as JSON
    url: str | None = None  #: a serving step's URL once it was ready
    outputs: dict[str, str] = field(default_factory=dict)  #: typed outputs of the finished step (model_artifacts, ...)
    progress: dict[str, Any] | None = None  #: the last progress it reported (:class:`mlrecipe.metrics.Progress`)
    matrix: dict[str, Any] | None = None  #: a matrix step's combination (matrix key -> value)
    backend: str | None = None  #: the backend it ran on (``None`` in records of older versions: the release's)

    def __post_init__(self) -> None:
        self.state = StepState(self.state)


@dataclass
class ReleaseRecord:
    """The state of one release: its inputs (to resume), its steps and who drives it."""

    release: str
    namespace: str
    backend: str
    inputs: dict[str, Any]
    state: StepState = StepState.PENDING
    steps: dict[str, StepRecord] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    needs: dict[str, list[str]] = field(default_factory=dict)  #: step -> the steps it waits for
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    driver_pid: int | None = None
    driver_created: float | None = None

    def __post_init__(self) -> None:
        self.state = StepState(self.state)

    @property
    def directory(self) -> Path:
        return release_dir(self.backend, self.namespace, self.release)

    def backend_of(self, step: StepRecord) -> str:
        """The backend ``step`` ran on: its own, or the release's."""
        return step.backend or self.backend

    def driver_alive(self) -> bool:
        """Whether the CLI process that drives this release is still alive."""
        if self.driver_pid is None:
            return False
        try:
            p = psutil.Process(self.driver_pid)
            return self.driver_created is None or abs(p.create_time() - self.driver_created) < 0.01
        except psutil.Error:
            return False

    def effective_state(self) -> StepState:
        """The state, with a running release whose driver died shown as ``interrupted``."""
        if self.state.active and not self.driver_alive():
            return StepState.INTERRUPTED
        return self.state

    def save(self) -> None:
        """Write the record atomically (write a temporary file, fsync, rename)."""
        self.updated = time.time()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        data = json.dumps(asdict(self), indent=2, sort_keys=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseRecord:
        steps = {k: StepRecord(**v) for k, v in data.pop("steps", {}).items()}
        return cls(steps=steps, **data)


def create_time(pid: int) -> float | None:
    """When process ``pid`` started (tells a reused pid apart), or ``None`` when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def load_record(backend: str, namespace: str, release: str) -> ReleaseRecord | None:
    path = release_dir(backend, namespace, release) / STATE_FILE
    if not path.exists():
        return None
    return ReleaseRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))


def all_records() -> list[ReleaseRecord]:
    """Every release with a state record, any backend and namespace."""
    root = mlrecipe_home() / "releases"
    out = []
    for path in sorted(root.glob(f"*/*/*/{STATE_FILE}")):
        try:
            out.append(ReleaseRecord.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    return out


def find_records(release: str, namespace: str | None = None, backend: str | None = None) -> list[ReleaseRecord]:
    """Records named ``release``, optionally narrowed by namespace and backend."""
    return [
        r
        for r in all_records()
        if r.release == release
        and (namespace is None or r.namespace == namespace)
        and (backend is None or r.backend == backend)
    ]
