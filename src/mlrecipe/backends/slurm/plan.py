"""The Slurm plan: the batch script of one step and the files it references."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import Plan
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.host.serving import Readiness
from mlrecipe.backends.host.volumes import Mount
from mlrecipe.backends.slurm.remote import RemotePlan
from mlrecipe.runtime import RUNTIME_PATH


@dataclass
class SlurmPlan(Plan):
    """What ``sbatch`` gets for one step: ``script`` (written to ``script_path``) and the step program.

    ``secret_env`` (credential-like variables) reaches the job through sbatch's environment, never the script.
    """

    step: str
    chart: str
    script: str
    script_path: Path
    program: dict[str, Any]
    program_path: Path
    runtime_path: Path
    step_dir: Path
    nodes: list[int]
    nnodes: int = 1
    mounts: list[Mount] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base_env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    readiness: Readiness | None = None
    url_file: Path | None = None
    extra_files: dict[Path, str] = field(default_factory=dict)
    remote: RemotePlan | None = None  #: submitted through a login node over SSH (:mod:`.remote`)
    mount_script_path: Path | None = None  #: the step's copy of the mount script, when the step has mounts

    def _packaged_files(self) -> dict[Path, Path]:
        """The package's files the job runs, by where the step gets its copy: the runtime, the mount script."""
        out = {self.runtime_path: RUNTIME_PATH}
        if self.mount_script_path is not None:
            out[self.mount_script_path] = MOUNT_SCRIPT_PATH
        return out

    @property
    def node_count(self) -> int:
        """The job's nodes (an MPI job runs one launcher, and mpirun starts ranks on every node)."""
        return self.nnodes

    @property
    def digest(self) -> str:
        """Identifies the script and program (a chained job is reused only when both are unchanged)."""
        payload = self.script + json.dumps(self.program, sort_keys=True) + json.dumps(
            sorted((str(k), v) for k, v in self.extra_files.items()))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def remote_files(self) -> dict[str, tuple[bytes, int]]:
        """Over SSH: every file the job reads, at its path on the login node, with its mode."""
        assert self.remote is not None
        remote = self.remote
        out = {
            remote.map_path(self.script_path): (remote.map_text(self.script).encode(), 0o755),
            remote.map_path(self.program_path): (
                remote.map_text(json.dumps(self.program, indent=2, sort_keys=True)).encode(), 0o644),
        }
        for path, source in self._packaged_files().items():
            out[remote.map_path(path)] = (source.read_bytes(), 0o644)
        for path, text in self.extra_files.items():
            out[remote.map_path(path)] = (remote.map_text(text).encode(), 0o755 if text.startswith("#!") else 0o644)
        out.update(remote.pipeline_payload())
        return out

    def _materialize_remote(self) -> str:
        assert self.remote is not None
        remote, host = self.remote, self.remote.target.host
        files = self.remote_files()
        script = remote.map_path(self.script_path)
        out = [f"# ==> {host}:{script} (over ssh {host}: sbatch --parsable {script})",
               files[script][0].decode().rstrip("\n")]
        program = remote.map_path(self.program_path)
        out += [f"# ==> {host}:{program} (step program run by {remote.map_path(self.runtime_path)})",
                files[program][0].decode().rstrip("\n")]
        for path in sorted(self.extra_files):
            out += [f"# ==> {host}:{remote.map_path(path)}", files[remote.map_path(path)][0].decode().rstrip("\n")]
        out.append(f"# staging to {host} (only the files whose sha256 differs there are copied):")
        out += [f"#   {path} ({len(data)} bytes)" for path, (data, _) in sorted(files.items())]
        return "\n".join(out) + "\n"

    def materialize(self) -> str:
        if self.remote is not None:
            return self._materialize_remote()
        out = [f"# ==> {self.script_path} (sbatch --parsable {self.script_path})", self.script.rstrip("\n")]
        out.append(f"# ==> {self.program_path} (step program run by {self.runtime_path})")
        out.append(json.dumps(self.program, indent=2, sort_keys=True))
        for path, text in sorted(self.extra_files.items()):
            out += [f"# ==> {path}", text.rstrip("\n")]
        return "\n".join(out) + "\n"

    def write(self) -> None:
        """Write the batch script, the step program, the runtime and the mount script into the step directory."""
        self.step_dir.mkdir(parents=True, exist_ok=True)
        _atomic(self.program_path, json.dumps(self.program, indent=2, sort_keys=True))
        _atomic(self.script_path, self.script)
        self.script_path.chmod(0o755)
        for path, text in self.extra_files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic(path, text)
            if text.startswith("#!"):
                path.chmod(0o755)
        for path, source in self._packaged_files().items():
            if not path.exists() or path.read_bytes() != source.read_bytes():
                tmp = path.with_suffix(".tmp")
                shutil.copyfile(source, tmp)
                tmp.replace(path)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
