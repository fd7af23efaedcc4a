"""The local backend: each node of a step is a process group on this machine.

Public to the rest of mlrecipe (``kfp/``, ``infra/``): the names in ``__all__``; everything else in this package
is the backend's own.
"""

from mlrecipe.backends.host.volumes import Mount, mount_problems
from mlrecipe.backends.local.options import LocalOptions

__all__ = ["LocalOptions", "Mount", "mount_problems"]
