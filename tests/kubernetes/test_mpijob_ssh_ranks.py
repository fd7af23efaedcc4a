"""The MPIJob launcher's rendered ``mpirun`` line against real Open MPI ranks that have only what an ssh login gives.

On a cluster the MPI operator starts the launcher with a hostfile of the workers, and ``mpirun`` starts every rank over
ssh on a worker whose container runs ``sshd``: a rank sees none of the worker container's env, only a login's
(``HOME``, ``PATH``, ``USER``) plus what ``mpirun -x`` forwards. Here the rendered line runs with the launcher
container's env; ``plm_rsh_agent`` is a stand-in ssh that starts the remote ``orted`` with a login's environment
only, for two hosts on this machine (127.0.0.2, 127.0.0.3: Open MPI takes them for remote ones). Changed from the
rendering, and nothing else: ``/etc/mlrecipe`` (the ConfigMap's mount) is a temporary directory holding the
ConfigMap's files, the launcher's ``HOME`` is a temporary directory, and the TCP interfaces are ``lo`` (the rendered
``*_if_exclude lo`` is right on a cluster, where pods talk over eth0). The full harness with a real sshd in every
worker pod is ``tests/kubelet``.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration

RANK_SCRIPT = """\
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", required=True)
parser.add_argument("--source-url", required=True)
opts = parser.parse_args()
print(f"rank {os.environ['OMPI_COMM_WORLD_RANK']} data-dir={opts.data_dir} source-url={opts.source_url} "
      f"release={os.environ['MLRECIPE_RELEASE']} node-rank={os.environ['PET_NODE_RANK']}", flush=True)
"""

LOGIN_SSH = """\
#!/bin/sh
# ssh as a worker's sshd would start the command: a login's environment only
echo "$1" >> "$(dirname "$0")/ssh-hosts"
shift
exec env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin USER=root LOGNAME=root SHELL=/bin/sh /bin/sh -c "$*"
"""


def _render(tmp_path: Path, script: Path, home: Path) -> list[dict[str, Any]]:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent(f"""\
        image: nvcr.io/nvidia/nemo:25.09
        resources: {{nnodes: 2, nproc_per_node: 1}}
        pvc: []
        process:
          env:
            - name: DATA_DIR
              value: "/fsx/{{{{ .Release.Name }}}}/data"
            - name: PILE_URL
              value: http://127.0.0.1:9/train
        mpirun:
          env:
            - name: HOME
              value: {home}
        launcher:
          type: mpirun
          script: {script}
          args: [--data-dir $DATA_DIR, --source-url $PILE_URL]
        """))
    out = subprocess.run(
        [str(BIN / "mlrecipe"), "template", "prep", "data-prep/mpijob-data-process", "-f", str(recipe),
         "-b", "kubernetes"],
        env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _launcher_line(mpijob: dict[str, Any], etc_mlrecipe: Path) -> str:
    container = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c"]
    line = container["args"][0]
    line = line.replace("/etc/mlrecipe/", f"{etc_mlrecipe}/")
    return re.sub(r"-mca (btl|oob)_tcp_if_exclude \S+", r"-mca \1_tcp_if_include lo", line)


def test_ranks_started_over_ssh_get_the_recipe_env_and_workers_run_sshd(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    home = tmp_path / "home"
    objects = _render(tmp_path, script, home)
    mpijob = next(o for o in objects if o["kind"] == "MPIJob")
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["/usr/sbin/sshd", "-De"], "MPIJob workers must run sshd, not the step program"

    runtime = next(o for o in objects if o["kind"] == "ConfigMap" and "step.json" in o["data"])
    etc_mlrecipe = tmp_path / "etc-mlrecipe"
    etc_mlrecipe.mkdir()
    for name, text in runtime["data"].items():
        (etc_mlrecipe / name).write_text(text)
    (tmp_path / "hostfile").write_text("127.0.0.2 slots=1\n127.0.0.3 slots=1\n")
    agent = tmp_path / "login-ssh"
    agent.write_text(LOGIN_SSH)
    agent.chmod(0o755)

    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    container_env = {e["name"]: e["value"] for e in launcher["env"]}
    env = {
        **container_env,
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",  # the image's python3 first, as on the launcher
        "OMPI_MCA_plm_rsh_agent": str(agent),
        "OMPI_MCA_orte_default_hostfile": str(tmp_path / "hostfile"),
    }
    assert container_env["DATA_DIR"] == "/fsx/prep/data" and "HOME" in container_env
    done = subprocess.run(["/bin/bash", "-c", _launcher_line(mpijob, etc_mlrecipe)], env=env, capture_output=True,
                          text=True, timeout=120)
    logs = sorted((home / "logs").rglob("*.log"))
    assert [p.name for p in logs] == ["node-0-rank-0.log", "node-1-rank-1.log"], "one log per MPI rank"
    text = "".join(p.read_text() for p in logs)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{text}"
    for rank in (0, 1):
        assert (f"rank {rank} data-dir=/fsx/prep/data source-url=http://127.0.0.1:9/train release=prep "
                f"node-rank={rank}") in text
    assert sorted((tmp_path / "ssh-hosts").read_text().split()) == ["127.0.0.2", "127.0.0.3"]
