"""The SageMaker backend: each step is one training job (boto3 ``create_training_job``), or its local mode.

Public to the rest of mlrecipe (``infra/``, ``kfp/``): the names in ``__all__``; everything else in this package
is the backend's own. boto3 is imported only when a client is made.
"""

from mlrecipe.backends.sagemaker.client import INSTALL_HINT, aws_client, error_code, require_boto3
from mlrecipe.backends.sagemaker.options import SageMakerOptions

__all__ = ["INSTALL_HINT", "SageMakerOptions", "aws_client", "error_code", "require_boto3"]
