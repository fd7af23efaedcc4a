"""A step's master port is chosen below the kernel's ephemeral range, where no outgoing connection can take it."""

from __future__ import annotations

import socket

import pytest

from mlrecipe import ports


def test_the_port_is_below_the_ephemeral_range_and_bindable() -> None:
    top = ports.ephemeral_range_start()
    chosen = {ports.free_port() for _ in range(20)}
    assert all(10000 <= port < top for port in chosen), (top, chosen)
    assert len(chosen) > 1, "the choice is random, not one fixed port"
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen.pop()))


def test_a_port_someone_listens_on_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [port, *range(10000, 10000 + k - 1)])
        assert ports.free_port() != port


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range_start", lambda: 1024)
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
