"""Options of the Slurm backend: the ``slurm:`` section of the config file, or ``--backend-opt key=value``.

Example::

    slurm:
      partition: gpu
      account: ml-team
      time: "04:00:00"
      qos: normal
      gpus_per_node: 8
      extra_sbatch: ["--exclusive", "--constraint=p4d"]
      volumes: {pv-fsx: /fsx, pv-efs: /shared/efs}
      mount: bind          # bind the recipe's pvc mount paths in each task (root), or none
      mode: step           # step: one job at a time; chain: the pipeline as afterok-dependent jobs

From a laptop, through the cluster's login node (:mod:`mlrecipe.backends.slurm.transport`)::

    slurm:
      ssh_host: alice@login.cluster.example   # or a Host of ~/.ssh/config
      ssh_port: 22
      ssh_identity: ~/.ssh/id_ed25519
      ssh_options: ["-o", "ProxyJump=bastion"]
      remote_root: ~/.mlrecipe                # the release's files on the cluster
      images: {default: /shared/envs/torch}   # Python environments on the nodes
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions
from mlrecipe.backends.slurm.transport import SshTarget
from mlrecipe.config import default_volume_root


class SlurmOptions(BackendOptions):
    """Settings of the Slurm backend (each step is one batch job)."""

    partition: str | None = Field(None, description="#SBATCH --partition")
    account: str | None = Field(None, description="#SBATCH --account")
    time: str | None = Field(None, description="#SBATCH --time (time limit, e.g. 04:00:00)")
    qos: str | None = Field(None, description="#SBATCH --qos")
    gpus_per_node: int | None = Field(
        None, ge=0, description="#SBATCH --gpus-per-node (default: the recipe's nvidia.com/gpu resource)"
    )
    extra_sbatch: list[str] = Field(default_factory=list, description="More #SBATCH options, e.g. --exclusive")
    srun_args: list[str] = Field(default_factory=list, description="More options of the srun that starts the nodes")
    volumes: dict[str, str] = Field(
        default_factory=dict, description="pvc name -> shared directory (default <root>/<pvc name>)"
    )
    root: str | None = Field(
        None, description="Directory of pvc volumes not in `volumes` (default $MLRECIPE_HOME/volumes)"
    )
    mount: Literal["bind", "none"] = Field(
        "bind", description="bind: bind-mount the shared directories at the pvc mount paths in every task (needs "
        "root or user namespaces); none: the mount paths already exist on the nodes"
    )
    mode: Literal["step", "chain"] = Field(
        "step", description="step: submit each step when the previous one succeeded; chain: submit the rest of "
        "the pipeline at once as jobs that depend on each other (afterok)"
    )
    images: dict[str, str] = Field(
        default_factory=dict, description="image name -> Python environment (venv prefix) on the nodes"
    )
    master_port: int | None = Field(
        None, ge=1, le=65535, description="PET_MASTER_PORT (default 20000 + job id % 10000)"
    )
    server_port: int | None = Field(
        None, ge=1, le=65535, description="Port of serving steps on their node (default: a port free on the node "
        "when the job starts; a port pinned in the recipe's probes wins)"
    )
    poll_seconds: float = Field(0.5, gt=0, description="How often the runner asks scontrol about a job")
    slurm_conf: str | None = Field(
        None, description="The cluster's slurm.conf (default $SLURM_CONF, else the client's own); recorded in "
        "each step's handle so that uninstall and resume reach the same cluster")

    ssh_host: str | None = Field(
        None, min_length=1, description="Submit through this login node over SSH ([user@]host, or a Host of "
        "~/.ssh/config); unset: the Slurm client tools of this machine")
    ssh_port: int | None = Field(None, ge=1, le=65535, description="SSH port of ssh_host (default: ssh's)")
    ssh_identity: str | None = Field(
        None, description="Private key file for ssh -i (a path; its content is never read or copied)")
    ssh_options: list[str] = Field(
        default_factory=list, description="More ssh arguments, passed through, e.g. [\"-o\", \"ProxyJump=bastion\"]")
    remote_root: str = Field(
        "~/.mlrecipe", min_length=1, description="With ssh_host: where the release's files (step programs, "
        "runtime, batch scripts, pipeline files, logs) live on the cluster")

    def ssh_target(self) -> SshTarget | None:
        """The login node to submit through, or ``None`` (this machine's Slurm client tools)."""
        if self.ssh_host is None:
            return None
        return SshTarget(host=self.ssh_host, port=self.ssh_port, identity=self.ssh_identity,
                         options=list(self.ssh_options))

    def volume_source(self, pvc: str) -> Path:
        """The shared directory of a pvc on the nodes."""
        if pvc in self.volumes:
            return Path(self.volumes[pvc]).expanduser()
        root = Path(self.root).expanduser() if self.root else default_volume_root()
        return root / pvc
