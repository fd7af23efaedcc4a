"""Render the batch script of one step: ``#SBATCH`` options, the env, the master address, ``srun``.

Pure text from data, so that ``mlrecipe template --backend slurm`` prints exactly what ``sbatch`` gets.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from mlrecipe.backends.host.volumes import Mount, wrap_argv

# PET_MASTER_ADDR is the first node's address as Slurm knows it (NodeAddr), so that several
# slurmd "nodes" on one machine (NodeAddr=127.0.0.1) work as well as a real cluster.
MASTER_LINES = [
    'MLRECIPE_MASTER_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    'PET_MASTER_ADDR=$(scontrol show node "$MLRECIPE_MASTER_NODE" 2>/dev/null'
    " | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n 1)",
    'export PET_MASTER_ADDR="${PET_MASTER_ADDR:-$MLRECIPE_MASTER_NODE}"',
]
DEFAULT_PORT = "$((20000 + SLURM_JOB_ID % 10000))"
# Each node gets a HOSTNAME of its own (git clones go to $HOME/tmp/$HOSTNAME on the shared HOME).
NODE_WRAPPER = ["sh", "-c", 'HOSTNAME="${SLURMD_NODENAME:-$(hostname)}"; export HOSTNAME; exec "$@"', "mlrecipe-node"]


@dataclass
class BatchScript:
    """The parts of one batch script."""

    header: list[str]
    sbatch: list[str]
    env: dict[str, str]
    path_prefix: str | None
    master_port: int | None
    elastic: bool
    launch: list[list[str]]
    redirect: str = ""
    comments: list[str] = field(default_factory=list)
    pre_launch: list[str] = field(default_factory=list)

    def render(self) -> str:
        out = ["#!/bin/bash"]
        out += [f"#SBATCH {opt}" for opt in self.sbatch]
        out += [f"# {line}" for line in self.header + self.comments]
        for key in sorted(self.env):
            out.append(f"export {key}={shlex.quote(self.env[key])}")
        if self.path_prefix:
            out.append(f'export PATH={shlex.quote(self.path_prefix)}:"$PATH"')
        out += MASTER_LINES
        port = str(self.master_port) if self.master_port else DEFAULT_PORT
        out.append(f"export PET_MASTER_PORT={port}")
        if self.elastic:
            out.append('export PET_RDZV_ENDPOINT="$PET_MASTER_ADDR:$PET_MASTER_PORT"')
        out.append('echo "[mlrecipe] job $SLURM_JOB_ID: nodes $SLURM_JOB_NODELIST,'
                   ' master $PET_MASTER_ADDR:$PET_MASTER_PORT"')
        out += self.pre_launch
        lines = [shlex.join(group) for group in self.launch if group]
        out.append("exec " + " \\\n  ".join(lines) + (f" {self.redirect}" if self.redirect else ""))
        return "\n".join(out) + "\n"


#: A port free on the node, chosen as :func:`mlrecipe.ports.free_port` chooses (below the ephemeral range, above
#: Ray's worker ports): a port of the ephemeral range may be taken by a process that binds port 0 before the server
#: binds it (seen: a Ray gRPC server answered the readiness probe).
FREE_PORT = """$(python3 -c 'import random, socket
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True
top = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
ports = [p for p in random.sample(range(20000, top), min(64, top - 20000)) if free(p)] if top > 20000 else []
if not ports:
    s = socket.socket()
    s.bind(("", 0))
    ports = [s.getsockname()[1]]
print(ports[0])')"""


def server_lines(port: int | None, url_file: str) -> list[str]:
    """Lines of a serving step's script: the node's address and a port, published in ``url_file``.

    The server binds the node's address as Slurm knows it (``NodeAddr``, i.e. ``PET_MASTER_ADDR`` of a
    one-node job) on ``port``, or on a port free on the node when the job starts; the URL is written
    (atomically) to ``url_file`` on the shared state directory, where the CLI reads it.
    """
    tmp = shlex.quote(url_file + ".tmp")
    return [
        'export MLRECIPE_SERVER_HOST="$PET_MASTER_ADDR"',
        f"export PORT={port if port else FREE_PORT}",
        'export MLRECIPE_SERVER_PORT="$PORT"',
        f'echo "http://$MLRECIPE_SERVER_HOST:$PORT" > {tmp} && mv {tmp} {shlex.quote(url_file)}',
        'echo "[mlrecipe] serving on http://$MLRECIPE_SERVER_HOST:$PORT"',
    ]


def rank_mounts_script(mounts: list[Mount], mount_script: Path) -> str:
    """A launch agent for mpirun: start Open MPI's daemon (``"$@"``) with the step's pvc bind mounts in place (made
    by the mount script at ``mount_script``)."""
    return ("#!/bin/sh\n# mlrecipe: MPI ranks on every node see the pvc mount paths (mpirun's launch agent)\n"
            f'exec {shlex.join(wrap_argv([], mounts, mount_script))} "$@"\n')
