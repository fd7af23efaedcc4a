"""The SageMaker backend: each step is one training job (boto3 ``create_training_job``), or its local mode.

Public to the rest of mlrecipe (``infra/``, ``kfp/``): the names in ``__all__``; everything else in this package
is the backend's own. The names load on first use, so a local job's supervisor
(``python -m mlrecipe.backends.sagemaker.local.supervisor``) starts without pydantic or the spec; boto3 is imported
only when a client is made.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlrecipe.backends.sagemaker.client import aws_client, error_code
    from mlrecipe.backends.sagemaker.options import SageMakerOptions
    from mlrecipe.backends.sagemaker.sdk import INSTALL_HINT, require_boto3

__all__ = ["INSTALL_HINT", "SageMakerOptions", "aws_client", "error_code", "require_boto3"]
_HOMES = {"INSTALL_HINT": "sdk", "aws_client": "client", "error_code": "client", "require_boto3": "sdk",
          "SageMakerOptions": "options"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
