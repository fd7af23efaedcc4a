"""A SageMaker client that runs everything on this machine: local mode of the ``sagemaker`` backend.

:class:`LocalSageMakerClient` answers the boto3 SageMaker client's calls that the backend makes, with the same
keyword arguments, response dicts and ``botocore.exceptions.ClientError`` codes: training jobs
(:mod:`.training`: one process group per host ``algo-N`` in private namespaces, SageMaker's ``/opt/ml``
tree and ``SM_*`` variables) and real-time endpoints (:mod:`.hosting`: an HTTP server on 127.0.0.1 serving
``/ping`` and ``/invocations``). State lives under ``root``, so another process's client sees and stops the
same jobs. Local-only extras: :meth:`log_path` and :meth:`endpoint_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrecipe.backends.host.gpu_lease import default_lease_dir
from mlrecipe.backends.sagemaker.local.channels import S3ClientFactory
from mlrecipe.backends.sagemaker.local.hosting import LocalHosting
from mlrecipe.backends.sagemaker.local.store import KINDS, Store, client_error
from mlrecipe.backends.sagemaker.local.training import OK, LocalTraining

NESTED = {"training-job": True, "model": False, "endpoint-config": False, "endpoint": True}


class LocalSageMakerClient(LocalTraining, LocalHosting):
    """boto3's SageMaker client, locally. ``python_bin_dir`` goes first on the PATH of jobs and endpoints;
    ``s3_client_factory`` (or ``endpoint_url``) reads ``s3://`` channels; ``stop_grace_s`` is how long stopped
    hosts get between SIGTERM and SIGKILL; file-system channels (FSx/EFS) bind ``file_systems_root/<id>/<path>``;
    a training job leases the GPUs it gives its hosts in ``gpu_lease_dir`` (the local backend's lease, by default
    :func:`~mlrecipe.backends.host.gpu_lease.default_lease_dir`)."""

    def __init__(self, root: Path, python_bin_dir: Path | None = None, *, endpoint_url: str | None = None,
                 s3_client_factory: S3ClientFactory | None = None, stop_grace_s: float = 10.0,
                 file_systems_root: Path | None = None, gpu_lease_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.python_bin_dir = Path(python_bin_dir) if python_bin_dir is not None else None
        self.stop_grace_s = stop_grace_s
        self.file_systems_root = Path(file_systems_root) if file_systems_root else self.root / "file-systems"
        self.gpu_lease_dir = Path(gpu_lease_dir) if gpu_lease_dir else default_lease_dir()
        if s3_client_factory is None:
            def s3_client_factory() -> Any:
                import boto3

                return boto3.client("s3", endpoint_url=endpoint_url)
        self.s3_client_factory = s3_client_factory

    def list_tags(self, ResourceArn: str, **_paging: Any) -> dict[str, Any]:
        """ListTags of a training job, model, endpoint config or endpoint (the request's ``Tags``)."""
        kind = ResourceArn.rsplit(":", 1)[-1].split("/", 1)[0]
        if kind in KINDS:
            store = Store(self.root, kind, nested=NESTED[kind])
            for name in store.names():
                record = store.read(name)
                if record is not None and record.get("arn") == ResourceArn:
                    return {"Tags": list(record["request"].get("Tags") or []), **OK}
        raise client_error("ValidationException", f"Resource {ResourceArn} not found.", "ListTags")
