"""A step's master port is chosen below the kernel's ephemeral range, where no outgoing connection can take it, and
above Ray's worker ports (10002-19999), which Ray binds on purpose; a Slurm server job's port the same way."""

from __future__ import annotations

import socket

import pytest

from mlrecipe import ports


def test_the_port_is_below_the_ephemeral_range_and_bindable() -> None:
    top = ports.ephemeral_range_start()
    chosen = {ports.free_port() for _ in range(20)}
    assert all(20000 <= port < top for port in chosen), (top, chosen)
    assert len(chosen) > 1, "the choice is random, not one fixed port"
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen.pop()))


def test_a_port_someone_listens_on_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [port, *range(20000, 20000 + k - 1)])
        assert ports.free_port() != port


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range_start", lambda: 1024)
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_slurm_server_jobs_port_is_chosen_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    """The Python of the batch script's ``$(python3 -c '...')``, run here in this process."""
    from mlrecipe.backends.slurm.script import FREE_PORT

    code = FREE_PORT.split("python3 -c '", 1)[1].rsplit("')", 1)[0]
    chosen = set()
    for _ in range(10):
        exec(compile(code, "FREE_PORT", "exec"), {})
        chosen.add(int(capsys.readouterr().out))
    top = ports.ephemeral_range_start()
    assert all(20000 <= port < top for port in chosen) and len(chosen) > 1, (top, chosen)
