"""What the backends that start processes on hosts (local, Slurm) share.

A step becomes one :class:`~.request.HostStepRequest` (:mod:`.request`), built the same way for both backends and
rendered by each: the local backend into processes (:mod:`mlrecipe.backends.local.plan`), Slurm into a batch job
(:mod:`mlrecipe.backends.slurm.job`). Its parts: the step program and the env contract (:mod:`.contract`), volume
mounts (:mod:`.volumes`), image -> Python environment (:mod:`.images`), the launch environment for devices and MPI
(:mod:`.launch_env`), chart-specific launches such as Ray Serve (:mod:`.launches`) and the readiness of serving
steps (:mod:`.serving`). Nodes on this machine start and stop through :mod:`.nodes`, and get their devices through
one grant (:mod:`.grant`) over the machine-wide GPU lease (:mod:`.gpu_lease`) and the CPU slots of a release's
parallel steps (:mod:`.cpus`), which the local backend's steps and SageMaker local mode's training jobs and endpoints
all take. What is particular to a chart is declared on its catalog entry
(:class:`~mlrecipe.spec.catalog.ChartInfo`), never as chart names here. This package imports no backend package,
and neither backend imports the other.
"""
