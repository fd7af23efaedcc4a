"""What the backends that start processes on hosts (local, Slurm) share.

Volume mounts (:mod:`.volumes`), image -> Python environment (:mod:`.images`), the launch environment for
devices and MPI (:mod:`.launch_env`), chart-specific launches such as Ray Serve (:mod:`.launches`) and the
readiness watcher of serving steps (:mod:`.serving`). Neither backend imports the other.
"""
