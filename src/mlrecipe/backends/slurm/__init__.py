"""The Slurm backend: each step is one batch job, one step runtime per node through ``srun``.

Public to the rest of mlrecipe (``infra/doctor``): the names in ``__all__``; everything else in this package is
the backend's own.
"""

from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.transport import SshTarget, SshTransport

__all__ = ["SlurmOptions", "SshTarget", "SshTransport"]
