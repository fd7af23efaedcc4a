"""Backends: local (default), slurm, kubernetes, sagemaker: one package each behind
:class:`~mlrecipe.backends.base.Backend`."""
