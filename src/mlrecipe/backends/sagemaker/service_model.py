"""botocore's SageMaker service model, as the backend's checks and the local mode's client validate requests with it.

Loading the whole model (a botocore session, then reading and parsing about 400 KB of compressed JSON) takes a few
hundred milliseconds, on the path of every command that plans a SageMaker step. So the part that validation reads
(the operations in :data:`OPERATIONS` and every shape they reach, documentation left out) is kept once in
``$MLRECIPE_HOME/cache/`` (when that home exists), under a key made of botocore's version and the model files
botocore would read (their paths, sizes and modification times): a new botocore or a changed model makes a new
entry. Whatever the cache holds or lacks, the checks are botocore's own (``ParamValidator`` over botocore's
``Shape`` objects).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from mlrecipe.backends.sagemaker.sdk import require_boto3

SERVICE = "sagemaker"
#: The operations whose requests are validated (training jobs; a local endpoint's model, config and endpoint).
OPERATIONS = ("CreateTrainingJob", "CreateModel", "CreateEndpointConfig", "CreateEndpoint")
#: Shapes read by name beside the operations' inputs.
SHAPES = ("TrainingInstanceType",)
CACHE_DIR = "cache"


def _model_files() -> list[list[Any]]:
    """(path, size, mtime) of every SageMaker model file in botocore's search paths (``AWS_DATA_PATH``,
    ``~/.aws/models``, botocore's own data)."""
    import botocore

    roots = [p for p in os.environ.get("AWS_DATA_PATH", "").split(os.pathsep) if p]
    roots += [os.path.expanduser("~/.aws/models"), os.path.join(os.path.dirname(botocore.__file__), "data")]
    out = []
    for root in roots:
        for path in sorted(Path(root, SERVICE).rglob("*.json*")):
            stat = path.stat()
            out.append([str(path), stat.st_size, stat.st_mtime_ns])
    return out


def _cache_file() -> Path:
    import botocore

    from mlrecipe.config import mlrecipe_home

    key = json.dumps([botocore.__version__, OPERATIONS, SHAPES, _model_files()])
    return mlrecipe_home() / CACHE_DIR / f"botocore-{SERVICE}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _keep(path: Path, data: dict[str, Any]) -> None:
    """Write the entry, only into a home that exists (planning never creates ``$MLRECIPE_HOME``)."""
    if not path.parent.parent.is_dir():
        return
    try:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the next process loads the whole model again


def _undocumented(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _undocumented(v) for k, v in value.items() if k != "documentation"}
    if isinstance(value, list):
        return [_undocumented(v) for v in value]
    return value


def _subset(full: dict[str, Any]) -> dict[str, Any]:
    """The service description with :data:`OPERATIONS` and the shapes they (and :data:`SHAPES`) reach."""
    shapes = full["shapes"]
    wanted = [full["operations"][op]["input"]["shape"] for op in OPERATIONS] + list(SHAPES)
    kept: dict[str, Any] = {}
    while wanted:
        name = wanted.pop()
        if name in kept:
            continue
        shape = kept[name] = shapes[name]
        wanted += [shape[k]["shape"] for k in ("member", "key", "value") if k in shape]
        wanted += [m["shape"] for m in shape.get("members", {}).values()]
    return _undocumented({"version": full.get("version"), "metadata": full["metadata"],
                          "operations": {op: full["operations"][op] for op in OPERATIONS}, "shapes": kept})


def _load_subset() -> dict[str, Any]:
    path = _cache_file()
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and set(cached.get("operations") or ()) == set(OPERATIONS):
            return cached
    except (OSError, ValueError):
        pass
    import botocore.session

    data = _subset(botocore.session.get_session().get_service_data(SERVICE))
    _keep(path, data)
    return data


@cache
def service_model() -> Any:
    """The part of botocore's ``sagemaker`` service model that validation reads (:data:`OPERATIONS`)."""
    require_boto3()
    from botocore.model import ServiceModel

    return ServiceModel(_load_subset(), service_name=SERVICE)


def input_shape(operation: str) -> Any:
    """The input shape of one of :data:`OPERATIONS`."""
    if operation not in OPERATIONS:
        raise ValueError(f"{operation} is not in service_model.OPERATIONS (the operations whose shapes are kept)")
    return service_model().operation_model(operation).input_shape


def validate_request(operation: str, params: dict[str, Any]) -> None:
    """Raise botocore's ``ParamValidationError`` for a request the boto3 client would refuse."""
    from botocore.validate import validate_parameters

    validate_parameters(params, input_shape(operation))
