"""The host layer's node group (``backends/host/nodes.py``) on real processes: two nodes, each a host of its own
(its hostname, a directory bound at /opt/ml), their identities alive while they run; the end of one wakes
``wait_any`` (a pidfd, not a timer: the wait is bounded by 60 s and returns long before); ``stop(grace)`` ends a node
that ignores SIGTERM with SIGKILL after the grace, and every node is reaped. The parent-death rule (a node ends with
its starter, a server does not), ``stop_nodes`` from identities alone (a group whose leader is gone, strays), and the
device grant a group hands to its nodes (the GPU lease held until the last one ends)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import is_free
from mlrecipe.backends.host.grant import DeviceGrant
from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec, alive, group_members, identity, start_time, stop_nodes
from mlrecipe.errors import LinkedPathError

pytestmark = pytest.mark.integration
needs_hosts = pytest.mark.skipif(shutil.which("unshare") is None or not os.path.isdir("/opt/ml"),
                                 reason="hosts need unshare and the /opt/ml mount point")

NODE = """
import signal, socket, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[1] == "stubborn" else signal.SIG_DFL)
print(socket.gethostname(), Path("/opt/ml/marker").read_text(), flush=True)
Path(sys.argv[2]).write_text("up")
if sys.argv[1] == "quick":
    sys.exit(3)
time.sleep(600)
"""


@needs_hosts
def test_a_node_group_starts_hosts_sees_an_end_at_once_and_stops_with_grace(tmp_path: Path) -> None:
    script = tmp_path / "node.py"
    script.write_text(NODE)
    specs = []
    for name, kind in (("algo-1", "quick"), ("algo-2", "stubborn")):
        tree = tmp_path / name
        tree.mkdir()
        (tree / "marker").write_text(f"tree of {name}")
        specs.append(NodeSpec(argv=[sys.executable, str(script), kind, str(tmp_path / f"{name}.up")],
                              env=dict(os.environ), log_path=tmp_path / f"{name}.log", hostname=name,
                              mounts=((str(tree), "/opt/ml"),)))
    group = NodeGroup(specs)
    group.start()
    try:
        idents = group.identities()
        assert len(idents) == 2 and all(len(i) == 2 for i in idents)
        group.wait_any(60)
        assert group.codes()[0] == 3, "the quick node's end woke the wait"
        assert group.codes()[1] is None and alive(idents[1]) and group.alive()
        while not (tmp_path / "algo-2.up").exists():
            group.wait_any(0.05)
        group.stop(grace=0.5)
        codes = group.codes()
        assert codes[0] == 3 and codes[1] is not None and codes[1] != 0, codes
        assert not group.alive() and not any(alive(i) for i in idents)
        assert (tmp_path / "algo-1.log").read_text().strip() == "algo-1 tree of algo-1"
        assert (tmp_path / "algo-2.log").read_text().strip() == "algo-2 tree of algo-2"
    finally:
        for p in group.processes:
            if p.poll() is None:
                p.kill()
                p.wait()


STARTER = """
import os, signal, sys, time
from pathlib import Path
from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec, unshare
trap = "trap 'echo TERM > {0}.end; exit 0' TERM; echo up > {0}.up; while :; do sleep 0.05; done"
out = Path(sys.argv[1])
specs = [NodeSpec(argv=["sh", "-c", trap.format(out / name)], env=dict(os.environ), log_path=out / f"{name}.log",
                  outlives_starter=name == "server") for name in ("step", "server")]
specs.append(NodeSpec(argv=[*unshare(pid=True), "sh", "-c", f"echo up > {out}/ray.up; sleep 300"],
                      env=dict(os.environ), log_path=out / "ray.log"))
group = NodeGroup(specs)
group.start()
print(" ".join(str(pid) for pid, _ in group.identities()), flush=True)
time.sleep(600)
"""


def _wait(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="a pid namespace needs unshare")
def test_the_parent_death_rule_ends_a_node_with_its_starter_and_keeps_a_server(tmp_path: Path) -> None:
    """The starter killed with SIGKILL: a node gets SIGTERM (its program stops its own processes), a node in a pid
    namespace of its own (a Ray job's wrapper: its ``unshare`` ignores SIGTERM) ends with every process in it, a
    node that outlives its starter (a server) keeps running."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    server_pid = ray_pid = 0
    try:
        assert starter.stdout is not None
        step_pid, server_pid, ray_pid = (int(p) for p in starter.stdout.readline().split())
        _wait(lambda: all((tmp_path / f"{name}.up").exists() for name in ("step", "server", "ray")), "nodes up")
        starter.kill()
        starter.wait()
        _wait(lambda: (tmp_path / "step.end").exists(), "SIGTERM for the node")
        assert (tmp_path / "step.end").read_text().strip() == "TERM"
        _wait(lambda: start_time(step_pid) is None, "end of the node")
        _wait(lambda: start_time(ray_pid) is None and group_members(ray_pid) == [], "end of the pid namespace")
        assert start_time(server_pid) is not None and not (tmp_path / "server.end").exists(), "the server was ended"
    finally:
        starter.kill()
        starter.wait()
        if server_pid and start_time(server_pid) is not None:
            stop_nodes([identity(server_pid)], 5)
        if ray_pid and start_time(ray_pid) is not None:
            stop_nodes([identity(ray_pid)], 0)


def test_stop_nodes_ends_a_group_whose_leader_is_gone_and_the_strays(tmp_path: Path) -> None:
    """From identities alone (as another process would): the members of a node's group left after its leader
    exited, and a process that left the group (its own session) named by ``strays``, are stopped; True once none
    is left."""
    group = NodeGroup([NodeSpec(argv=["sh", "-c", f"sleep 300 & setsid sleep 301 & echo $! > {tmp_path}/stray; "
                                      "exit 0"], env=dict(os.environ), log_path=tmp_path / "node.log")])
    group.start()
    ident, = group.identities()
    group.wait_any(60)
    assert group.codes() == [0]
    _wait(lambda: (tmp_path / "stray").exists() and (tmp_path / "stray").read_text().strip() != "", "the stray")
    stray = int((tmp_path / "stray").read_text())
    _wait(lambda: len(group_members(ident[0])) == 1, "the leader's sleep in its group")
    member, = group_members(ident[0])
    try:
        assert stop_nodes([ident], 5, strays=lambda: [stray] if start_time(stray) is not None else [])
        assert group_members(ident[0]) == [] and start_time(member) is None and start_time(stray) is None
    finally:
        group.close()
        for pid in (member, stray):
            if start_time(pid) is not None:
                os.kill(pid, signal.SIGKILL)


def _gated(tmp_path: Path, name: str) -> NodeSpec:
    """A node that exits 0 once ``tmp_path/<name>.go`` exists."""
    return NodeSpec(argv=["sh", "-c", f'while [ ! -e "{tmp_path}/{name}.go" ]; do sleep 0.05; done'],
                    env=dict(os.environ), log_path=tmp_path / f"{name}.log")


def test_a_node_group_hands_its_device_grant_to_its_nodes(tmp_path: Path) -> None:
    """The group passes its grant's GPU lease to every node and lets go of its own hold: the GPU stays leased until
    the last node ends, however long the starter lives; closing the group gives the grant's CPU slots back."""
    leases, gpu, slots = tmp_path / "leases", Gpu(0, "GPU-node-group-test", "fake", 9.0), CpuSlots(4)
    grant = DeviceGrant(leases, "rel", "step", gpus=(gpu,), cpus=slots, ranks=2, cpu_holder="run")
    assert grant.take() is None
    group = NodeGroup([_gated(tmp_path, "first"), _gated(tmp_path, "second")], grant=grant)
    try:
        group.start()
        assert grant.fds == [] and not is_free(leases, gpu), "the nodes hold the lease, not this process"
        (tmp_path / "first.go").touch()
        _wait(lambda: group.codes()[0] == 0, "the first node's end")
        assert not is_free(leases, gpu), "the lease lasts until the last node ends"
        (tmp_path / "second.go").touch()
        _wait(lambda: group.codes() == [0, 0], "the second node's end")
        assert is_free(leases, gpu)
        assert slots.holders == {"run": 2}
        group.close()
        assert slots.used == 0
    finally:
        for name in ("first", "second"):
            (tmp_path / f"{name}.go").touch()
        group.stop(0)


def test_a_node_that_cannot_start_still_hands_the_grant_over(tmp_path: Path) -> None:
    """The second node's log is a planted link: it is refused, the first node (started) holds the lease, this
    process does not; stopping the group frees the GPU."""
    leases, gpu = tmp_path / "leases", Gpu(0, "GPU-node-group-test", "fake", 9.0)
    grant = DeviceGrant(leases, "rel", "step", gpus=(gpu,))
    assert grant.take() is None
    (tmp_path / "elsewhere.log").write_text("kept\n")
    (tmp_path / "second.log").symlink_to(tmp_path / "elsewhere.log")
    group = NodeGroup([_gated(tmp_path, "first"), _gated(tmp_path, "second")], grant=grant)
    try:
        with pytest.raises(LinkedPathError):
            group.start()
        assert len(group.identities()) == 1 and grant.fds == [] and not is_free(leases, gpu)
        assert group.stop(5) and is_free(leases, gpu)
        assert (tmp_path / "elsewhere.log").read_text() == "kept\n"
    finally:
        (tmp_path / "first.go").touch()
        group.stop(0)
