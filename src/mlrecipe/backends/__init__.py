"""Backends: local (default), slurm, kubernetes — one module each behind :class:`Backend`."""
