"""The host layer's node group (``backends/host/nodes.py``) on real processes: two nodes, each a host of its own
(its hostname, a directory bound at /opt/ml), their identities alive while they run; the end of one wakes
``wait_any`` (a pidfd, not a timer: the wait is bounded by 60 s and returns long before); ``stop(grace)`` ends a node
that ignores SIGTERM with SIGKILL after the grace, and every node is reaped."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec, alive

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("unshare") is None or not os.path.isdir("/opt/ml"),
                                 reason="hosts need unshare and the /opt/ml mount point")]

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
