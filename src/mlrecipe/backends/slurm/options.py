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
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions
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

    def volume_source(self, pvc: str) -> Path:
        """The shared directory of a pvc on the nodes."""
        if pvc in self.volumes:
            return Path(self.volumes[pvc]).expanduser()
        root = Path(self.root).expanduser() if self.root else default_volume_root()
        return root / pvc
