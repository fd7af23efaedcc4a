"""One container as a process tree in its own mount, UTS and PID namespaces, started through ``unshare``.

``unshare --kill-child`` makes the namespace's first process die with ``unshare``, and every process of a PID
namespace dies with its first one: killing the ``unshare`` process ends the whole container, whatever sessions or
process groups its programs made (torch's elastic agent, the step runtime's script, sshd's sessions)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ENTER = Path(__file__).with_name("enter.py")


@dataclass(frozen=True)
class Mount:
    """A bind mount of ``source`` (a directory or file on this machine) at ``target`` in the container."""

    source: Path
    target: str
    readonly: bool = False


@dataclass
class ContainerProcess:
    """A started container: its ``unshare`` process and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    @classmethod
    def start(cls, name: str, hostname: str, argv: list[str], env: dict[str, str], mounts: list[Mount],
              layer: list[str], workdir: str, state_dir: Path, log_path: Path) -> ContainerProcess:
        """Start ``argv`` with ``env`` only, in fresh namespaces, output to ``log_path``."""
        plan = {"hostname": hostname, "layer": layer, "workdir": workdir, "argv": argv, "env": env,
                "mounts": [{"source": str(m.source), "target": m.target, "readonly": m.readonly} for m in mounts]}
        plan_path = state_dir / f"{name}.plan.json"
        plan_path.write_text(json.dumps(plan))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 (closed by stop)
        command = ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
                   sys.executable, "-I", str(ENTER), str(plan_path)]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        return cls(name, process, log_path, log)

    def poll(self) -> int | None:
        return self.process.poll()

    def exit_code(self) -> int:
        """The container's exit status as the kubelet reports it (128 + signal for a killed one)."""
        code = self.process.returncode
        return 128 - code if code is not None and code < 0 else int(code or 0)

    def namespace_init(self) -> int | None:
        """The host pid of the container's first process (the child of ``unshare``)."""
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def stop(self, grace: float) -> None:
        """SIGTERM to the container's first process, then after ``grace`` seconds SIGKILL to all of it."""
        if self.process.poll() is None:
            init = self.namespace_init()
            if init is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
