"""Whether the AWS SDK is installed, asked without importing it: a leaf that both the client provider and the local
mode's request checks (:mod:`.service_model`) use, so that neither imports the other."""

from __future__ import annotations

import importlib.util

from mlrecipe.errors import UserError

INSTALL_HINT = "the sagemaker backend needs boto3: pip install 'mlrecipe[sagemaker]' (or pip install boto3)"


def require_boto3() -> None:
    """Raise a :class:`UserError` with the install hint when boto3 (or botocore) is not installed; found without
    importing it (local mode never imports boto3 unless a channel reads ``s3://``)."""
    try:
        found = all(importlib.util.find_spec(name) is not None for name in ("boto3", "botocore"))
    except ValueError:  # a module set to None in sys.modules (how tests hide a package)
        found = False
    if not found:
        raise UserError(INSTALL_HINT)
