"""A training step's plan: its typed ``create_training_job`` request and the files of its ``mlrecipe`` channel."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from mlrecipe.backends.base import Plan
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.sagemaker.api import CreateTrainingJob
from mlrecipe.backends.sagemaker.request import MOUNT_SCRIPT_FILE, PROGRAM_FILE, RUNTIME_FILE
from mlrecipe.credentials import redact_env
from mlrecipe.runtime import RUNTIME_PATH


@dataclass
class TrainingJobPlan(Plan):
    """What ``submit`` sends: ``request`` (the typed ``create_training_job`` request, job name of attempt 1)
    and ``program`` (the step program, uploaded with the runtime to the ``mlrecipe`` channel's URI)."""

    path: ClassVar[str] = "training"  #: submitted by :mod:`.training_steps`
    step: str
    chart: str
    request: CreateTrainingJob
    program: dict[str, Any]
    job_prefix: str
    digest: str
    step_dir: Path
    notes: list[str] = field(default_factory=list)
    local_file_systems: dict[str, str] = field(default_factory=dict)  #: mode local: file system id -> directory
    mount_script: bool = False  #: mode local: the channel carries the mount script (its pvcs' bind mounts)

    @property
    def program_uri(self) -> str:
        """The ``mlrecipe`` channel's URI."""
        return self.request.program_uri

    @property
    def node_count(self) -> int:
        return self.request.instance_count

    def shown_request(self) -> dict[str, Any]:
        """The request with credential-like values masked."""
        shown = self.request.kwargs()
        shown["Environment"] = redact_env(shown.get("Environment") or {})
        return shown

    def materialize(self) -> str:
        """One YAML document: the ``create_training_job`` keyword arguments, then the channel's files as comments."""
        doc = yaml.safe_dump(self.shown_request(), sort_keys=False, default_flow_style=False, width=120)
        lines = [f"# step {self.step} ({self.chart}): sagemaker create_training_job"]
        lines += [f"# {note}" for note in self.notes if note.startswith("warning: ")]
        shipped = f"{RUNTIME_FILE}, mlrecipe's step runtime" + (
            f", and {MOUNT_SCRIPT_FILE}, its mount script" if self.mount_script else "")
        lines += ["---", doc.rstrip("\n"), f"# ==> {self.program_uri}{PROGRAM_FILE} (step program; with {shipped})"]
        lines += [f"# {line}" for line in json.dumps(self.program, indent=2, sort_keys=True).splitlines()]
        return "\n".join(lines) + "\n"

    def files(self) -> dict[str, bytes]:
        """The ``mlrecipe`` channel's files by name."""
        files = {PROGRAM_FILE: json.dumps(self.program, indent=2, sort_keys=True).encode(),
                 RUNTIME_FILE: RUNTIME_PATH.read_bytes()}
        if self.mount_script:
            files[MOUNT_SCRIPT_FILE] = MOUNT_SCRIPT_PATH.read_bytes()
        return files
