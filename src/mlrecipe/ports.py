"""Free TCP ports on this machine (a step's master port, a server's port, TensorBoard's).

A port is chosen *below* the kernel's ephemeral range (``net.ipv4.ip_local_port_range``): between the check here
and the moment a launcher binds it, the kernel may hand a port of that range to any process's outgoing connection
(a busy machine makes thousands), and the launcher then fails or, worse, its ranks meet someone else's socket.
Ports below the range are taken only by programs that bind them on purpose, which the check sees.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where the choice falls when the ephemeral range cannot be read (Linux's default range starts at 32768).
_DEFAULT_RANGE_START = 32768
#: Above Ray's client port (10001) and its default worker ports (10002-19999), which Ray binds on purpose.
_LOWEST = 20000
_TRIES = 64


def ephemeral_range_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_RANGE_START


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now, below the ephemeral range when one is (else one the kernel picks)."""
    top = ephemeral_range_start()
    if top > _LOWEST + _TRIES:
        for port in random.sample(range(_LOWEST, top), _TRIES):
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
