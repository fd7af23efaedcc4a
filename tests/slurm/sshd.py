"""A real OpenSSH ``sshd`` on 127.0.0.1 in front of the test Slurm cluster: the "login node" of the SSH tests.

Throwaway ed25519 keys (a host key, a user key) in a temporary directory; ``known_hosts`` holds the host
key as ``[127.0.0.1]:PORT``. The "remote" side is this machine, so tests point ``remote_root`` at a
directory of their own to see staging really happen.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


def has_sshd() -> bool:
    return Path("/usr/sbin/sshd").exists() and all(shutil.which(t) for t in ("ssh", "ssh-keygen"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Sshd:
    """A running sshd; ``options`` are the ssh arguments (identity aside) that reach it and trust its host key."""

    proc: subprocess.Popen[bytes]
    port: int
    identity: Path
    known_hosts: Path
    directory: Path
    argv: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return "root@127.0.0.1"

    def ssh_options(self, known_hosts: Path | None = None) -> list[str]:
        return ["-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]

    def config(self, known_hosts: Path | None = None, more_ssh: list[str] | None = None, **extra: str) -> str:
        """The ``slurm:`` section of a config file that submits through this sshd (``more_ssh``: more
        ssh_options, e.g. ``-o SetEnv=SLURM_CONF=...``, which this sshd accepts)."""
        opts = ", ".join(f'"{o}"' for o in [*self.ssh_options(known_hosts), *(more_ssh or [])])
        fields = {"ssh_host": self.host, "ssh_port": str(self.port), "ssh_identity": str(self.identity),
                  "ssh_options": f"[{opts}]", **extra}
        return "slurm:\n" + "".join(f"  {k}: {v}\n" for k, v in fields.items())

    def session_pids(self) -> list[int]:
        """The sshd processes serving connections (the listener's children)."""
        with contextlib.suppress(psutil.Error):
            return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True) if p.name() == "sshd"
                    or "sshd" in " ".join(p.cmdline()[:1])]
        return []

    def restart(self, timeout: float = 20.0) -> None:
        """Start sshd again on the same port with the same keys (after :meth:`stop`)."""
        self.proc = _spawn(self.argv, self.directory)
        _wait_ready(self, timeout)

    def stop(self) -> None:
        """Stop the listener and every session's sshd, as a login node's sshd dies: the sessions' own processes are
        not killed (their connections close; a shell killed in its rc files can leave state behind, such as
        pyenv's rehash lock, which then holds every later session's rc for a minute)."""
        with contextlib.suppress(psutil.Error):
            for pid in self.session_pids():
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_sshd(directory: Path, timeout: float = 20.0) -> Sshd:
    """Start sshd on a free port of 127.0.0.1 with fresh keys; wait until ``ssh ... true`` gets through."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    host_pub = keygen(directory / "host_key")
    user_pub = keygen(directory / "user_key")
    (directory / "authorized_keys").write_text(user_pub + "\n")
    (directory / "authorized_keys").chmod(0o600)
    port = free_port()
    known = directory / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.split()[:2])}\n")
    argv = ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", "-h", str(directory / "host_key"), "-p", str(port),
            "-o", "ListenAddress=127.0.0.1", "-o", f"AuthorizedKeysFile={directory / 'authorized_keys'}",
            "-o", "PidFile=none", "-o", "PermitRootLogin=prohibit-password", "-o", "StrictModes=no",
            "-o", "MaxSessions=50", "-o", "MaxStartups=50", "-o", "AcceptEnv=SLURM_CONF"]
    sshd = Sshd(_spawn(argv, directory), port, directory / "user_key", known, directory, argv)
    _wait_ready(sshd, timeout)
    return sshd


def _spawn(argv: list[str], directory: Path) -> subprocess.Popen[bytes]:
    with open(directory / "sshd.log", "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)


def _wait_ready(sshd: Sshd, timeout: float) -> None:
    probe = ["ssh", "-o", "BatchMode=yes", "-p", str(sshd.port), "-i", str(sshd.identity), *sshd.ssh_options(),
             "-o", "ControlPath=none", sshd.host, "true"]
    deadline = time.monotonic() + timeout
    while True:
        if sshd.proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(sshd.directory / 'sshd.log').read_text()}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            if subprocess.run(probe, capture_output=True, timeout=15, check=False).returncode == 0:
                return
        if time.monotonic() > deadline:
            sshd.stop()
            raise RuntimeError(f"sshd did not answer in {timeout:.0f}s: {(sshd.directory / 'sshd.log').read_text()}")
        time.sleep(0.1)


class RefusingPort:
    """Holds ``port`` while sshd is down: accepts each connection and closes it at once (ssh exits 255), and
    counts them, so that a test knows a client tried during the outage."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.attempts = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                conn.close()
                self.attempts += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)
