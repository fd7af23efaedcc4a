"""Backend registry: adding a backend is one line here."""

from __future__ import annotations

import importlib

from mlrecipe.backends.base import Backend

BACKENDS: dict[str, str] = {
    "local": "mlrecipe.backends.local.backend:LocalBackend",
    "kubernetes": "mlrecipe.backends.kubernetes.backend:KubernetesBackend",
    "slurm": "mlrecipe.backends.slurm.backend:SlurmBackend",
}

DEFAULT_BACKEND = "local"


class UnknownBackendError(ValueError):
    pass


def get_backend(name: str) -> Backend:
    """Instantiate the backend called ``name`` (its module is imported only now)."""
    target = BACKENDS.get(name)
    if target is None:
        raise UnknownBackendError(f"unknown backend '{name}'; known: {', '.join(sorted(BACKENDS))}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()
