"""Backend registry: adding a backend is one line here (its module is imported only when used; the names alone, for
the CLI's addresses, import nothing)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mlrecipe.errors import UnknownBackendError

if TYPE_CHECKING:
    from mlrecipe.backends.base import Backend

BACKENDS: dict[str, str] = {
    "local": "mlrecipe.backends.local.backend:LocalBackend",
    "kubernetes": "mlrecipe.backends.kubernetes.backend:KubernetesBackend",
    "slurm": "mlrecipe.backends.slurm.backend:SlurmBackend",
    "sagemaker": "mlrecipe.backends.sagemaker.backend:SageMakerBackend",
}

DEFAULT_BACKEND = "local"


def backend_class(name: str) -> type[Backend[Any, Any, Any]]:
    """The class of the backend called ``name``."""
    target = BACKENDS.get(name)
    if target is None:
        raise UnknownBackendError(f"unknown backend '{name}'; known: {', '.join(sorted(BACKENDS))}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str, overrides: dict[str, Any] | None = None) -> Backend[Any, Any, Any]:
    """The backend called ``name`` with its options: the config file's section, then ``overrides``."""
    from mlrecipe.backends.options import load_options

    cls = backend_class(name)
    return cls(load_options(cls.options_type, name, overrides))
