"""Check a ``create_training_job`` request against botocore's SageMaker service model before anything is uploaded.

botocore's ``ParamValidator`` checks types, lengths, ranges and required fields; the enums (instance types) and
patterns (names, ARNs, S3 URIs) it leaves to the service are checked here from the shapes' metadata. Each problem
is a :class:`SpecIssue` at the recipe's file, line and field, or at the option it came from.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from mlrecipe.backends.sagemaker.request import PROGRAM_CHANNEL, TrainingRequest
from mlrecipe.backends.sagemaker.service_model import input_shape as _input_shape
from mlrecipe.backends.sagemaker.service_model import service_model
from mlrecipe.errors import SpecIssue
from mlrecipe.spec.load import StepSpec

OPTION_SOURCE = "sagemaker options (config file or -B)"
#: A local-mode host's own tree (bound over this machine's /opt/ml in its root): mount paths there are not this
#: machine's.
HOST_TREE = PurePosixPath("/opt/ml")


def input_shape(operation: str = "CreateTrainingJob") -> Any:
    """The input shape of a SageMaker operation."""
    return _input_shape(operation)


def training_instance_types() -> list[str]:
    """Every training instance type botocore's service model knows."""
    return list(service_model().shape_for("TrainingInstanceType").enum)


def request_problems(params: dict[str, Any], operation: str = "CreateTrainingJob",
                     local: bool = False) -> list[tuple[str, str]]:
    """(request field path, message) for each problem of ``params``; ``local``: ``file://`` URIs are fine."""
    from botocore.validate import ParamValidator

    shape = input_shape(operation)
    report = ParamValidator().validate(params, shape)
    out = [(str(name).lstrip("."), _botocore_message(kind, details))
           for kind, name, details in getattr(report, "_errors", [])]
    _walk(shape, params, "", out, local)
    return out


def _botocore_message(kind: str, details: dict[str, Any]) -> str:
    if kind == "missing required field":
        return f"required field {details.get('required_name')} is missing"
    if kind == "invalid type":
        return f"must be {', '.join(t.__name__ for t in details.get('valid_types', []))}, got {details.get('param')!r}"
    if kind == "invalid range":
        return f"must be >= {details.get('min_allowed')}, got {details.get('param')!r}"
    if kind == "invalid length":
        return f"length must be >= {details.get('min_allowed')}, got {details.get('param')!r}"
    return f"{kind}: {details}"


def _walk(shape: Any, value: Any, path: str, out: list[tuple[str, str]], local: bool) -> None:
    if value is None:
        return
    most = shape.metadata.get("max")
    if shape.type_name in ("list", "map") and isinstance(value, list | dict) and most is not None and len(value) > most:
        out.append((path, f"at most {most} {'items' if isinstance(value, list) else 'entries'} (SageMaker's limit), "
                    f"got {len(value)}"))
    if shape.type_name == "structure" and isinstance(value, dict):
        for key, member in shape.members.items():
            if key in value:
                _walk(member, value[key], f"{path}.{key}" if path else key, out, local)
    elif shape.type_name == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            _walk(shape.member, item, f"{path}[{i}]", out, local)
    elif shape.type_name == "map" and isinstance(value, dict):
        for key, item in value.items():
            _walk(shape.key, key, f"{path}.{key}", out, local)
            _walk(shape.value, item, f"{path}.{key}", out, local)
    elif shape.type_name == "string" and isinstance(value, str):
        message = _string_problem(shape, value, local)
        if message:
            out.append((path, message))
    elif shape.type_name in ("integer", "long") and isinstance(value, int):
        high = shape.metadata.get("max")
        if high is not None and value > high:
            out.append((path, f"must be <= {high}, got {value}"))


def _string_problem(shape: Any, value: str, local: bool) -> str:
    enum = shape.enum
    if enum and value not in enum:
        close = difflib.get_close_matches(value, enum, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return f"{value!r} is not one of SageMaker's {shape.name} values{hint}"
    high = shape.metadata.get("max")
    if high is not None and len(value) > high:
        return f"at most {high} characters, got {len(value)}"
    if value.startswith("file://") and not local:
        return (f"{value!r}: file:// URIs work in mode local only; upload the data to S3 (aws s3 sync) and name its "
                "s3:// URI")
    if value.startswith("file://"):
        host = file_uri_host(value)
        if host not in ("", "localhost"):
            return (f"{value!r}: a file:// URI names this machine's files, not host {host!r}: write file:///path "
                    f"(three slashes; file:///{value[7:]} for a path under /)")
    pattern = shape.metadata.get("pattern")
    compiled = _compiled(pattern) if pattern else None
    if compiled is not None and not (local and value.startswith("file://")) and compiled.fullmatch(value) is None:
        return f"{value!r} does not match SageMaker's pattern {pattern} ({shape.name})"
    return ""


def file_uri_host(uri: str) -> str:
    """The host of a ``file://`` URI ("" for ``file:///path``), lower case."""
    from urllib.parse import urlsplit

    return (urlsplit(uri).hostname or "").lower()


@cache
def _compiled(pattern: str) -> re.Pattern[str] | None:
    """The service model's pattern as a Python regex; ``None`` for the few in Java-only syntax (``\\p{...}``)."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


def channel_problems(params: dict[str, Any]) -> list[tuple[str, str]]:
    """(request field path, message) for channel names SageMaker or the step would trip over: a name given twice
    (the later channel would replace the earlier one's files), ``mlrecipe`` (the step program's channel), ``.``
    and ``..`` (directories, not channels)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, channel in enumerate(params.get("InputDataConfig") or []):
        name = channel.get("ChannelName") if isinstance(channel, dict) else None
        path = f"InputDataConfig[{i}].ChannelName"
        if not isinstance(name, str):
            continue
        if name in (".", ".."):
            out.append((path, f"channel name {name!r} is a directory, not a name"))
        elif name == PROGRAM_CHANNEL and i > 0:
            out.append((path, f"the channel name {PROGRAM_CHANNEL} is mlrecipe's own (it carries the step program); "
                       "name the channel otherwise"))
        elif name in seen:
            out.append((path, f"channel {name} is given twice (channel names must be unique; a pvc's channel is "
                       "named after the pvc)"))
        seen.add(name)
    return out


def host_mount_point_problem(target: str) -> str | None:
    """Mode local: what stops the mount script (``inside``) from binding a file-system channel (a directory) at
    ``target`` in a host's root, whose entries are this machine's with their links copied: a symbolic link anywhere
    on the path (the script refuses it even when the path exists), an entry on it that is not a directory. A path in
    the host's own ``/opt/ml`` is not this machine's and is not looked at."""
    path = PurePosixPath(target)
    if path == HOST_TREE or HOST_TREE in path.parents:
        return None
    for entry in (*reversed(path.parents), path):
        local = Path(entry)
        if local.is_symlink():
            return f"mount point {target}: {entry} is a symbolic link; name the path without links"
        if local.exists() and not local.is_dir():
            if entry == path:
                return f"mount point {target} is a file, unlike its source (a file-system channel, a directory)"
            return f"mount point {target}: {entry} is not a directory"
    return None


def host_mount_issues(step: StepSpec) -> list[SpecIssue]:
    """Mode local: each pvc mount path that a host's program could not bind (:func:`host_mount_point_problem`), at
    the recipe's ``pvc[i].mount_path``; found while planning, not when the job runs."""
    found = ((i, host_mount_point_problem(pvc.mount_path)) for i, pvc in enumerate(step.recipe.pvc))
    return [step.issue(f"pvc[{i}].mount_path", problem) for i, problem in found if problem]


def issues_of(step: StepSpec, request: TrainingRequest, local: bool = False) -> list[SpecIssue]:
    """The request's problems (and refused credentials) at the recipe's lines or the options; in mode local also
    the pvc mount paths this machine's entries stop (:func:`host_mount_issues`)."""
    issues = host_mount_issues(step) if local else []
    issues += [step.issue(where, f"{name} looks like a credential: it would be visible to anyone who may "
                          "DescribeTrainingJob; keep it in AWS Secrets Manager and read it in the job through "
                          "the execution role (sagemaker role_arn), or let the role grant the access")
               for name, where in request.secrets]
    for path, message in request_problems(request.request, local=local) + channel_problems(request.request):
        origin = request.origin(path)
        if origin is None:
            issues.append(SpecIssue(f"step {step.name}", None, path, message))
        elif origin[0] == "recipe":
            issues.append(step.issue(origin[1], f"{message} (request field {path})"))
        else:
            issues.append(SpecIssue(OPTION_SOURCE, None, origin[1], f"{message} (request field {path})"))
    return issues
