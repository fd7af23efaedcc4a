"""Models, endpoint configs and endpoints of local SageMaker mode.

``create_endpoint`` checks and extracts the first production variant's model archive (``file://`` or ``s3://``,
:mod:`.archive`; an archive that cannot be read or is refused makes the endpoint ``Failed`` at once) and starts
:mod:`.model_server` with the client's Python as a node of the host layer (:mod:`mlrecipe.backends.host.nodes`: a
group of one node that outlives its starter, in its own session, in a private mount namespace where the model is at
``/opt/ml/model``, ``SM_MODEL_DIR``); the endpoint is ``Creating`` until the server has loaded the model and listens
(``InService``), ``Failed`` with the reason if it cannot (or cannot start: its log a planted link, say).
``delete_endpoint`` stops the server.

An endpoint on a GPU instance type (``ml.p*``, ``ml.g*``) gets one GPU of this machine, granted as the local
backend's steps and the training jobs get theirs (:mod:`mlrecipe.backends.host.grant`: any one free GPU, through the
machine-wide lease): the server holds the lease until it ends (deleted, or failed), so no other step is given that
GPU meanwhile; when every GPU is held the endpoint is ``Failed`` with their holders. An endpoint on another instance
type sees no GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mlrecipe.backends.host.devices import visible_gpus
from mlrecipe.backends.host.grant import DeviceGrant
from mlrecipe.backends.host.mount_points import mount_argv, user_namespaces_problem
from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec, alive, identity, still_running, stop_nodes, unshare
from mlrecipe.backends.sagemaker.local.archive import ArchiveError, extract_model
from mlrecipe.backends.sagemaker.local.channels import S3ClientFactory
from mlrecipe.backends.sagemaker.local.endpoint import EndpointRecord, EndpointStatus, EndpointStore
from mlrecipe.backends.sagemaker.local.store import Store, arn, client_error, when
from mlrecipe.backends.sagemaker.local.training import OK, validate_request
from mlrecipe.errors import LinkedPathError

SERVER = Path(__file__).with_name("model_server.py")
MODEL_DIR = "/opt/ml/model"
GPU_INSTANCE = re.compile(r"ml\.(p|g)[0-9]")


def _model_mount_point() -> bool:
    """Whether the server can see its model at /opt/ml/model (a private bind mount, the mount point made in its
    namespace only), as in SageMaker's containers; else it reads it where it was extracted."""
    return shutil.which("unshare") is not None and user_namespaces_problem() is None


def _failed(record: EndpointRecord, reason: str) -> None:
    record.status, record.failure_reason, record.modified = EndpointStatus.FAILED, reason, time.time()


def _missing(what: str, name: str, operation: str) -> Exception:
    return client_error("ValidationException", f"Could not find {what} \"{arn(what.replace(' ', '-'), name)}\".",
                        operation)


class LocalHosting:
    """The hosting half of :class:`~.client.LocalSageMakerClient`."""

    root: Path
    python_bin_dir: Path | None
    s3_client_factory: S3ClientFactory | None
    gpu_lease_dir: Path

    @property
    def _models(self) -> Store:
        return Store(self.root, "model")

    @property
    def _configs(self) -> Store:
        return Store(self.root, "endpoint-config")

    @property
    def _endpoints(self) -> EndpointStore:
        return EndpointStore(self.root)

    def _create(self, store: Store, kind: str, name: str, request: dict[str, Any], operation: str,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
        validate_request(operation, request)
        record = {"request": request, "arn": arn(kind, name), "created": time.time(), **(extra or {})}
        if not store.create(name, record):
            raise client_error("ValidationException", f"Cannot create already existing {kind.replace('-', ' ')} "
                               f"\"{record['arn']}\".", operation)
        return record

    def create_model(self, **request: Any) -> dict[str, Any]:
        """CreateModel (``PrimaryContainer.ModelDataUrl`` is the archive the endpoint serves)."""
        record = self._create(self._models, "model", request["ModelName"], request, "CreateModel")
        return {"ModelArn": record["arn"], **OK}

    def describe_model(self, ModelName: str) -> dict[str, Any]:
        record = self._models.read(ModelName)
        if record is None:
            raise _missing("model", ModelName, "DescribeModel")
        return {**record["request"], "ModelArn": record["arn"], "CreationTime": when(record["created"]), **OK}

    def delete_model(self, ModelName: str) -> dict[str, Any]:
        if not self._models.delete(ModelName):
            raise _missing("model", ModelName, "DeleteModel")
        return dict(OK)

    def create_endpoint_config(self, **request: Any) -> dict[str, Any]:
        """CreateEndpointConfig."""
        record = self._create(self._configs, "endpoint-config", request["EndpointConfigName"], request,
                              "CreateEndpointConfig")
        return {"EndpointConfigArn": record["arn"], **OK}

    def describe_endpoint_config(self, EndpointConfigName: str) -> dict[str, Any]:
        record = self._configs.read(EndpointConfigName)
        if record is None:
            raise _missing("endpoint configuration", EndpointConfigName, "DescribeEndpointConfig")
        return {**record["request"], "EndpointConfigArn": record["arn"], "CreationTime": when(record["created"]),
                **OK}

    def delete_endpoint_config(self, EndpointConfigName: str) -> dict[str, Any]:
        if not self._configs.delete(EndpointConfigName):
            raise _missing("endpoint configuration", EndpointConfigName, "DeleteEndpointConfig")
        return dict(OK)

    def _python(self) -> str:
        if self.python_bin_dir is not None:
            for name in ("python3", "python"):
                if (self.python_bin_dir / name).exists():
                    return str(self.python_bin_dir / name)
        return sys.executable

    def create_endpoint(self, **request: Any) -> dict[str, Any]:
        """CreateEndpoint: ``Creating`` at once; the model server starts in the background."""
        op = "CreateEndpoint"
        validate_request(op, request)
        name, config_name = request["EndpointName"], request["EndpointConfigName"]
        config = self._configs.read(config_name)
        if config is None:
            raise _missing("endpoint configuration", config_name, op)
        variant = config["request"]["ProductionVariants"][0]
        model = self._models.read(variant["ModelName"])
        if model is None:
            raise _missing("model", variant["ModelName"], op)
        now = time.time()
        record = EndpointRecord(request=request, arn=arn("endpoint", name), variant=variant, created=now,
                                modified=now, creator=identity(os.getpid()))
        if not self._endpoints.create(record):
            raise client_error("ValidationException", f"Cannot create already existing endpoint "
                               f"\"{record.arn}\".", op)
        home = self._endpoints.home(name)
        container = model["request"].get("PrimaryContainer") or (model["request"].get("Containers") or [{}])[0]
        try:
            extract_model(container.get("ModelDataUrl", ""), home / "model", self.s3_client_factory)
        except ArchiveError as exc:  # Failed at once, nothing of the archive kept, no server started
            reason = str(exc)[:1024]
            shutil.rmtree(home / "model", ignore_errors=True)
            (home / "model.tar.gz").unlink(missing_ok=True)
            self._endpoints.update(name, lambda r: _failed(r, reason))
            return {"EndpointArn": record.arn, **OK}
        gpus = tuple(visible_gpus()) if GPU_INSTANCE.match(variant.get("InstanceType", "")) else ()
        grant = DeviceGrant(self.gpu_lease_dir, "sagemaker-local", name, gpus=gpus, any_one_gpu=True)
        wait = grant.take()
        if wait is not None:
            reason = f"InsufficientCapacity: every GPU of this machine is leased: {wait.holders()}"[:1024]
            self._endpoints.update(name, lambda r: _failed(r, reason))
            return {"EndpointArn": record.arn, **OK}
        devices = ",".join(str(g.index) for g in grant.granted_gpus)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": devices, **(container.get("Environment") or {})}
        if self.python_bin_dir is not None:
            env["PATH"] = f"{self.python_bin_dir}{os.pathsep}{env.get('PATH', '')}"
        argv = [self._python(), str(SERVER), str(home)]
        if _model_mount_point():
            env["SM_MODEL_DIR"] = MODEL_DIR
            argv = [*unshare(mount=True), *mount_argv([(str(home / "model"), MODEL_DIR)], argv)]
        else:
            env["SM_MODEL_DIR"] = str(home / "model")
        group = NodeGroup([NodeSpec(argv=argv, env=env, log_path=home / "server.log", outlives_starter=True,
                                    gpus=grant.granted_gpus)], grant=grant)  # the server holds the lease until it ends
        try:
            group.start()
        except (OSError, LinkedPathError) as exc:
            reason = f"the model server cannot start: {exc}"[:1024]
            self._endpoints.update(name, lambda r: _failed(r, reason))
            return {"EndpointArn": record.arn, **OK}
        [server] = group.identities()
        self._endpoints.update(name, lambda r: setattr(r, "server", server))
        self._servers.append(group)
        return {"EndpointArn": record.arn, **OK}

    @property
    def _servers(self) -> list[NodeGroup]:
        """The servers this client started that still run (those that ended reaped, their pidfds closed)."""
        if not hasattr(self, "_server_groups"):
            self._server_groups: list[NodeGroup] = []
        return still_running(self._server_groups)

    def _settle(self, name: str, record: EndpointRecord) -> EndpointRecord:
        """A ``Creating`` endpoint becomes ``InService`` once its server is ready, ``Failed`` if it cannot be."""
        if record.status is not EndpointStatus.CREATING:
            return record
        home = self._endpoints.home(name)
        change: dict[str, Any] = {}
        if (home / "ready.json").is_file():
            change = {"status": EndpointStatus.IN_SERVICE,
                      "port": json.loads((home / "ready.json").read_text())["port"]}
        elif (home / "failed.txt").is_file():
            change = {"status": EndpointStatus.FAILED, "failure_reason": (home / "failed.txt").read_text()[:1024]}
        elif record.server and not alive(record.server):
            change = {"status": EndpointStatus.FAILED,
                      "failure_reason": f"the model server exited (see {home / 'server.log'})"}
        elif not record.server and not alive(record.creator):
            change = {"status": EndpointStatus.FAILED,
                      "failure_reason": "the endpoint's creation was interrupted before its "
                                                            "model server started"}
        if not change:
            return record

        def settle(r: EndpointRecord) -> None:
            for key, value in change.items():
                setattr(r, key, value)
            r.modified = time.time()

        return self._endpoints.update(name, settle) or record

    def describe_endpoint(self, EndpointName: str) -> dict[str, Any]:
        """DescribeEndpoint: ``Creating`` -> ``InService`` | ``Failed`` (with ``FailureReason``)."""
        record = self._endpoints.read(EndpointName)
        if record is None:
            raise _missing("endpoint", EndpointName, "DescribeEndpoint")
        record = self._settle(EndpointName, record)
        variant = record.variant
        out = {"EndpointName": EndpointName, "EndpointArn": record.arn,
               "EndpointConfigName": record.request["EndpointConfigName"], "EndpointStatus": record.status.value,
               "CreationTime": when(record.created), "LastModifiedTime": when(record.modified),
               "ProductionVariants": [{"VariantName": variant.get("VariantName", "AllTraffic"),
                                       "CurrentInstanceCount": variant.get("InitialInstanceCount", 1),
                                       "DesiredInstanceCount": variant.get("InitialInstanceCount", 1)}], **OK}
        if record.failure_reason:
            out["FailureReason"] = record.failure_reason
        return out

    def delete_endpoint(self, EndpointName: str) -> dict[str, Any]:
        """DeleteEndpoint: the server is stopped (SIGTERM, SIGKILL after 5 s; every process of its host gone) and
        the endpoint forgotten."""
        record = self._endpoints.read(EndpointName)
        if record is None:
            raise _missing("endpoint", EndpointName, "DeleteEndpoint")
        server = record.server
        if server:
            stop_nodes([server], 5.0, reap=lambda: self._servers)  # returns when no server process holds the port
        with self._endpoints.locked():
            shutil.rmtree(self._endpoints.home(EndpointName), ignore_errors=True)
        return dict(OK)

    def list_endpoints(self, NameContains: str | None = None, **_filters: Any) -> dict[str, Any]:
        names = [n for n in self._endpoints.names() if not NameContains or NameContains in n]
        return {"Endpoints": [{k: v for k, v in self.describe_endpoint(n).items()
                               if k in ("EndpointName", "EndpointArn", "CreationTime", "LastModifiedTime",
                                        "EndpointStatus")} for n in names], **OK}

    def list_models(self, NameContains: str | None = None, **_filters: Any) -> dict[str, Any]:
        """ListModels with ``NameContains`` (one page)."""
        return {"Models": self._listed(self._models, "Model", NameContains), **OK}

    def list_endpoint_configs(self, NameContains: str | None = None, **_filters: Any) -> dict[str, Any]:
        """ListEndpointConfigs with ``NameContains`` (one page)."""
        return {"EndpointConfigs": self._listed(self._configs, "EndpointConfig", NameContains), **OK}

    @staticmethod
    def _listed(store: Store, what: str, contains: str | None) -> list[dict[str, Any]]:
        records = [(n, r) for n in store.names() if not contains or contains in n if (r := store.read(n)) is not None]
        return [{f"{what}Name": n, f"{what}Arn": r["arn"], "CreationTime": when(r["created"])} for n, r in records]

    def endpoint_url(self, endpoint_name: str) -> str:
        """Local-only: ``http://127.0.0.1:<port>`` of an ``InService`` endpoint (``/ping``, ``/invocations``)."""
        record = self._endpoints.read(endpoint_name)
        if record is None:
            raise _missing("endpoint", endpoint_name, "DescribeEndpoint")
        record = self._settle(endpoint_name, record)
        if record.status is not EndpointStatus.IN_SERVICE:
            raise client_error("ValidationException", f"Endpoint {endpoint_name} is {record.status.value}, not "
                               "InService.", "InvokeEndpoint")
        return f"http://127.0.0.1:{record.port}"
