"""Where the Slurm client tools run: on this machine (a subprocess, as always) or on a login node over SSH.

Every Slurm call of the backend (sbatch, scontrol, squeue, sacct, scancel, reading a node's log) goes
through :func:`transport_for`. Over SSH, the system ``ssh`` client runs with OpenSSH connection
multiplexing (``ControlMaster=auto``, a control socket per destination and settings under a private
directory of this machine's temp dir, ``ControlPersist=60``): the first call opens one connection and every later
call (and every later mlrecipe command within a minute) reuses it. The user's ``~/.ssh/config``, agent,
``ProxyJump`` and ``known_hosts`` apply as they do to ``ssh`` itself; ``BatchMode=yes`` means no prompt
ever waits (a key with a passphrase needs the agent). Host keys are checked as the user's ssh config
says (OpenSSH's default refuses an unknown host in batch mode; nothing here turns checking off).
mlrecipe writes no password or key: ``ssh_identity`` is a path handed to ``-i``.

A connection that fails or drops (ssh's own exit status 255) is a
:class:`~mlrecipe.errors.TransientBackendError` while a step runs (the runner asks again); a host key
that is unknown or changed is a :class:`~mlrecipe.errors.SlurmError` that says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from mlrecipe.errors import SlurmError, TransientBackendError

#: ssh's exit status for its own failures (connection refused or dropped, authentication, host key).
SSH_FAILED = 255
#: A staging prelude's status when the login node's files no longer have the digests mlrecipe staged.
STALE_STATUS = 97
STALE_MARK = "mlrecipe-stale-staging"


class StaleStaging(SlurmError):
    """Files staged earlier changed on the login node: stage again (nothing was submitted)."""
CONTROL_PERSIST_SECONDS = 60


class SshTarget(BaseModel):
    """The login node and how to reach it (recorded in each step's handle: no secret in it)."""

    host: str
    port: int | None = None
    identity: str | None = None
    options: list[str] = Field(default_factory=list)

    def control_dir(self) -> Path:
        """A private directory for control sockets (short: a socket path must fit 104 bytes)."""
        path = Path(tempfile.gettempdir()) / f"mlrecipe-ssh-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def settings_key(self) -> str:
        """Tells apart shared connections opened with different settings (``%C`` covers host, port and user
        only): a connection is reused only by calls that would have opened the same one."""
        raw = json.dumps([self.identity, self.options])
        return hashlib.sha256(raw.encode()).hexdigest()[:8]

    def argv(self) -> list[str]:
        """The ``ssh`` command line up to (and including) the destination."""
        out = ["ssh", "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
               "-o", f"ControlPath={self.control_dir()}/{self.settings_key()}-%C",
               "-o", f"ControlPersist={CONTROL_PERSIST_SECONDS}",
               "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if self.port is not None:
            out += ["-p", str(self.port)]
        if self.identity:
            out += ["-i", str(Path(self.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
        return [*out, *self.options, "--", self.host]

    def close(self) -> None:
        """Ask the shared connection's master to exit (nothing when none runs)."""
        subprocess.run([*self.argv()[:-2], "-O", "exit", "--", self.host], capture_output=True, timeout=10,
                       check=False, stdin=subprocess.DEVNULL)


def describe_ssh_failure(host: str, stderr: str) -> str:
    """One line on why ssh could not run a command on ``host``."""
    said = " ".join(line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("@@@"))
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        return (f"the host key of {host} is not the one in known_hosts (changed or spoofed): ssh refused to connect;"
                " if the key really changed, remove the old line (ssh-keygen -R) and connect once with ssh")
    if "Host key verification failed" in stderr or "No ED25519 host key is known" in stderr \
            or "host key is known" in stderr:
        return (f"the host key of {host} is not in known_hosts (unknown or different): ssh refused to connect; "
                f"connect once with 'ssh {host}' to check and record it")
    return f"cannot reach the Slurm login node {host} over ssh: {said or 'ssh exited with status 255'}"


class Transport:
    """Runs a Slurm client command; the local transport is a plain subprocess with ``SLURM_CONF`` in its env."""

    remote: SshTarget | None = None

    def __init__(self, slurm_conf: str | None) -> None:
        self.slurm_conf = slurm_conf

    def run(self, argv: list[str], timeout: float = 30, env: dict[str, str] | None = None,
            prelude: str = "") -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with ``env`` added to its environment; a command that cannot start is a SlurmError.
        ``prelude``: shell lines run first on a login node (staging); none here."""
        assert not prelude, "a prelude runs on a login node only"
        full = {**os.environ, **(env or {})}
        if self.slurm_conf:
            full["SLURM_CONF"] = self.slurm_conf
        try:
            return subprocess.run(argv, capture_output=True, text=True, env=full, timeout=timeout,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise SlurmError(f"{argv[0]} not found: install the Slurm client tools (apt-get install slurm-client)"
                             ) from exc
        except subprocess.TimeoutExpired:
            raise TransientBackendError(f"{' '.join(argv)} did not answer in {timeout:.0f}s") from None


class SshTransport(Transport):
    """Runs commands on the login node through the shared ssh connection.

    The command (and ``env``, secrets included) travels on ssh's stdin as a ``sh -s`` script, never on a
    command line that ``ps`` shows on either machine.
    """

    def __init__(self, target: SshTarget, slurm_conf: str | None) -> None:
        super().__init__(slurm_conf)
        self.remote = target

    def script(self, argv: list[str], env: dict[str, str] | None = None, prelude: str = "") -> str:
        lines = ["set -e", *([prelude.rstrip("\n")] if prelude else [])]
        if self.slurm_conf:
            lines.append(f"export SLURM_CONF={shlex.quote(self.slurm_conf)}")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
        lines.append(shlex.join(argv))
        return "\n".join(lines) + "\n"

    def run(self, argv: list[str], timeout: float = 30, env: dict[str, str] | None = None,
            prelude: str = "") -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the login node after ``prelude``; a prelude that found stale files raises StaleStaging."""
        result = self.run_script(self.script(argv, env, prelude), timeout if not prelude else max(timeout, 300))
        if prelude and result.returncode == STALE_STATUS and STALE_MARK in result.stderr:
            raise StaleStaging(result.stderr.strip())
        return result

    def run_script(self, script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a shell script on the login node (its exit status is the script's; ssh's own failure raises)."""
        raw = self.run_bytes(["sh", "-s"], script.encode(), timeout)
        return subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
                                           raw.stderr.decode(errors="replace"))

    def run_bytes(self, remote_argv: list[str], data: bytes, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        """Run ``remote_argv`` on the login node with ``data`` on its stdin; bytes out."""
        assert self.remote is not None
        argv = [*self.remote.argv(), shlex.join(remote_argv)]
        try:
            result = subprocess.run(argv, input=data, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError as exc:
            raise SlurmError("ssh not found: install the OpenSSH client (apt-get install openssh-client)") from exc
        except subprocess.TimeoutExpired:
            raise TransientBackendError(f"ssh {self.remote.host} did not answer in {timeout:.0f}s") from None
        if result.returncode == SSH_FAILED:
            message = describe_ssh_failure(self.remote.host, result.stderr.decode(errors="replace"))
            if "host key" in message:
                raise SlurmError(message)
            raise TransientBackendError(message)
        return result


def transport_for(ssh: SshTarget | None, slurm_conf: str | None) -> Transport:
    """The transport of a cluster: over ``ssh`` when given, else this machine."""
    return SshTransport(ssh, slurm_conf) if ssh is not None else Transport(slurm_conf)
