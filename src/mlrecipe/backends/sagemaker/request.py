"""The ``create_training_job`` request of a step: built from the recipe and the options, with where each
field came from (so that a bad value is reported at the recipe's file, line and field, or at the option).

Mapping: ``resources.nnodes`` -> ``InstanceCount``; ``resources.node_type`` -> the ``ml.`` instance type;
``ebs.storage`` -> ``VolumeSizeInGB``; a pvc with a file system in ``file_systems`` -> a file-system channel
(FSx for Lustre or EFS, with the VPC config) that the step runtime sees at the pvc's mount path (in mode local a pvc
without one is the local backend's volume directory, so local and SageMaker-local steps share ``/fsx``);
``sagemaker.inputs`` -> data channels; the command block's ``env`` -> ``Environment``. The container runs
mlrecipe's step runtime from the ``mlrecipe`` channel, which carries the step program.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host.contract import contract_env, step_program
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.sagemaker import names, parts
from mlrecipe.backends.sagemaker.api import Channel, CreateTrainingJob, FileSystemChannel, S3Channel
from mlrecipe.backends.sagemaker.options import FileSystem, SageMakerOptions
from mlrecipe.metrics import METRICS_VAR
from mlrecipe.spec.load import StepSpec

PROGRAM_CHANNEL = "mlrecipe"
CHANNEL_ROOT = "/opt/ml/input/data"
PROGRAM_FILE = "step.json"
RUNTIME_FILE = "step_runtime.py"
#: Mode local: the mount script (:mod:`mlrecipe.backends.host.mount_points`), shipped in the ``mlrecipe`` channel,
#: with which a host's program binds its file-system channels at the pvcs' mount paths.
MOUNT_SCRIPT_FILE = MOUNT_SCRIPT_PATH.name
ENTRYPOINT = ["python3", f"{CHANNEL_ROOT}/{PROGRAM_CHANNEL}/{RUNTIME_FILE}",
              f"{CHANNEL_ROOT}/{PROGRAM_CHANNEL}/{PROGRAM_FILE}"]
#: Variables of the earlier steps' outputs that mean nothing inside a SageMaker container.
HOST_ONLY_ENV = frozenset({"MLRECIPE_PIPELINE_DIR"})
_UNIT_BYTES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30,
               "ti": 2**40}

#: Where a request field came from: ("recipe", field path) or ("option", option name).
Origin = tuple[str, str]


@dataclass
class TrainingRequest:
    """The typed ``create_training_job`` request of a step and where its values came from."""

    job: CreateTrainingJob
    program: dict[str, Any]
    origins: dict[str, Origin] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    secrets: list[tuple[str, str]] = field(default_factory=list)  #: (variable, recipe field) refused
    local_file_systems: dict[str, str] = field(default_factory=dict)  #: mode local: file system id -> directory
    mount_script: bool = False  #: mode local: the ``mlrecipe`` channel carries :data:`MOUNT_SCRIPT_FILE`
    digest: str = ""  #: set once the request is complete (:func:`build_request`)

    @property
    def request(self) -> dict[str, Any]:
        """The keyword arguments of ``create_training_job`` (what validation checks, as botocore would)."""
        return self.job.kwargs()

    def origin(self, request_path: str) -> Origin | None:
        """The origin of the longest recorded prefix of ``request_path``."""
        best = None
        for prefix, where in self.origins.items():
            if (request_path == prefix or request_path.startswith((prefix + ".", prefix + "["))) and (
                    best is None or len(prefix) > len(best[0])):
                best = (prefix, where)
        return best[1] if best else None

    def content_digest(self) -> str:
        """Identifies what the job runs (its name, tags and program location left out): equal digests, same job."""
        body = {k: v for k, v in self.request.items() if k not in ("TrainingJobName", "Tags")}
        body["Environment"] = _remote(body.get("Environment"))  # the same job wherever the checkout is
        payload = json.dumps([body, self.program], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def instance_type(node_type: str) -> str:
    """An EC2 instance type as SageMaker names it (``p4d.24xlarge`` -> ``ml.p4d.24xlarge``)."""
    return node_type if node_type.startswith("ml.") else f"ml.{node_type}"


#: SageMaker instance families with GPUs (p: training, g: graphics/inference).
_GPU_INSTANCE = re.compile(r"ml\.(p|g)[0-9]")
#: An image tag or name that says it is built for CPUs (the AWS deep learning containers' ``-cpu-``).
_CPU_IMAGE = re.compile(r"(^|[-_:/.])cpu([-_.]|$)", re.IGNORECASE)


def image_mismatch(kind: str, image: str) -> str:
    """A warning when a GPU instance type runs an image built for CPUs (its GPUs would go unused); "" otherwise."""
    if _GPU_INSTANCE.match(kind) and _CPU_IMAGE.search(image):
        return (f"warning: instance type {kind} has GPUs, but image {image} is a CPU image: they would go unused; "
                "use the image's GPU variant (-gpu-, -cu1xx-) or a CPU instance type")
    return ""


def volume_gb(storage: str | int | float) -> int:
    """A Kubernetes quantity (``200Gi``, ``500G``) in whole GB (rounded up, at least 1)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGTkmgt]i?)?\s*", str(storage))
    if match is None:
        raise ValueError(f"must be a size such as 200Gi, got {storage!r}")
    size = float(match.group(1)) * _UNIT_BYTES[(match.group(2) or "").lower()]
    return max(1, int(-(-size // 10**9)))


def program_uri(options: SageMakerOptions, ctx: ReleaseContext, step: str, digest: str) -> str:
    """Where the step program and the runtime go (the ``mlrecipe`` channel's URI)."""
    if options.s3_prefix:
        return f"{options.s3_prefix.rstrip('/')}/{ctx.namespace}/{ctx.release}/{step}/{digest}/{PROGRAM_CHANNEL}/"
    return f"file://{ctx.step_dir(step) / PROGRAM_CHANNEL}/"


def output_uri(options: SageMakerOptions, ctx: ReleaseContext, step: str) -> str:
    """OutputDataConfig.S3OutputPath: where SageMaker puts model.tar.gz."""
    if options.s3_prefix:
        return f"{options.s3_prefix.rstrip('/')}/{ctx.namespace}/{ctx.release}/{step}/output"
    return f"file://{options.local_dir() / 'output' / ctx.namespace / ctx.release / step}"


def build_request(step: StepSpec, ctx: ReleaseContext, options: SageMakerOptions,
                  env: dict[str, str] | None = None) -> TrainingRequest:
    """The request of ``step`` (its name is that of attempt 1; :mod:`.backend` may pick a later attempt)."""
    recipe, res = step.recipe, step.recipe.resources
    origins: dict[str, Origin] = {}
    notes: list[str] = []
    program = step_program(step, ctx)
    image, mapped = parts.image(step, options)
    origins["AlgorithmSpecification.TrainingImage"] = ("option", "images") if mapped else ("recipe", "image")
    kind = instance_type(res.node_type) if res.node_type else options.instance_type
    origins["ResourceConfig.InstanceType"] = ("recipe", "resources.node_type") if res.node_type else (
        "option", "instance_type")
    origins["ResourceConfig.InstanceCount"] = ("recipe", "resources.nnodes")
    mismatch = image_mismatch(kind, image)
    if mismatch:
        notes.append(mismatch)
    size = options.volume_size_gb
    origins["ResourceConfig.VolumeSizeInGB"] = ("option", "volume_size_gb")
    if recipe.ebs is not None:
        origins["ResourceConfig.VolumeSizeInGB"] = ("recipe", "ebs.storage")
        try:
            size = volume_gb(recipe.ebs.storage)
        except ValueError:
            size = -1  # reported by validation at ebs.storage
        if recipe.ebs.mount_path != "/tmp":
            notes.append(f"ebs.mount_path {recipe.ebs.mount_path}: the job's ML storage volume holds /opt/ml; "
                         "the recipe's mount path is not created")
    channels: list[Channel] = []
    origins["InputDataConfig"] = ("recipe", "sagemaker.inputs")
    origins["InputDataConfig[0]"] = ("option", "s3_prefix")
    links: list[tuple[str, str]] = []  # (channel directory, pvc mount path)
    local = options.mode == "local"
    local_file_systems: dict[str, str] = {}
    for pvc_index, pvc in enumerate(recipe.pvc):
        fs = options.file_systems.get(pvc.name)
        if fs is None and local:
            fs = local_file_system(pvc.name)
            local_file_systems[fs.id] = str(options.volume_dir(pvc.name))
            notes.append(f"pvc {pvc.name} ({pvc.mount_path}): local mode mounts {options.volume_dir(pvc.name)}, the "
                         f"local backend's volume, as file system {fs.id}")
        if fs is None:
            notes.append(f"pvc {pvc.name} ({pvc.mount_path}) is not mounted: name its file system with "
                         f"-B sagemaker.file_systems.{pvc.name}.id=fs-... (FSx for Lustre or EFS, with subnets)")
            continue
        origins[f"InputDataConfig[{len(channels) + 1}]"] = ("option", f"file_systems.{pvc.name}")
        origins[f"InputDataConfig[{len(channels) + 1}].ChannelName"] = ("recipe", f"pvc[{pvc_index}].name")
        channels.append(FileSystemChannel(pvc.name, fs.id, fs.access_mode, fs.type, fs.directory_path))
        links.append((f"{CHANNEL_ROOT}/{pvc.name}", pvc.mount_path))
    if links:
        program["inline_script"] = [_bind_line(links) if local else ";\n".join(_link(*pair) for pair in links),
                                    *program["inline_script"]]
        notes.append("file-system channels are " + ("bind-mounted" if local else "linked")
                     + " at the recipes' pvc mount paths before the step runs")
    for i, item in enumerate(recipe.sagemaker.inputs if recipe.sagemaker else []):
        origins[f"InputDataConfig[{len(channels) + 1}]"] = ("recipe", f"sagemaker.inputs[{i}].uri")
        origins[f"InputDataConfig[{len(channels) + 1}].ChannelName"] = ("recipe", f"sagemaker.inputs[{i}].name")
        channels.append(S3Channel(item.name, item.uri))
    environment, secrets = _environment(step, ctx, env if options.mode == "local" else _remote(env), origins)
    vpc = parts.vpc(options)
    job = CreateTrainingJob(
        training_job_name="", image=image, entrypoint=tuple(ENTRYPOINT), role_arn=parts.role(options),
        channels=(S3Channel(PROGRAM_CHANNEL, ""), *channels), output_path=output_uri(options, ctx, step.name),
        instance_type=kind, instance_count=res.nnodes, volume_size_gb=size, max_runtime=options.max_run,
        environment=environment, max_wait=options.max_wait, checkpoint_s3_uri=options.checkpoint_s3_uri, vpc=vpc,
        network_isolation=options.network_isolation, inter_container_encryption=options.inter_container_encryption)
    origins.update({"RoleArn": ("option", "role_arn"), "OutputDataConfig": ("option", "s3_prefix"),
                    "StoppingCondition.MaxRuntimeInSeconds": ("option", "max_run")})
    if options.max_wait is not None:
        origins["StoppingCondition.MaxWaitTimeInSeconds"] = ("option", "max_wait")
    if options.checkpoint_s3_uri:
        origins["CheckpointConfig"] = ("option", "checkpoint_s3_uri")
    if vpc is not None:
        origins["VpcConfig.Subnets"] = ("option", "subnets")
        origins["VpcConfig.SecurityGroupIds"] = ("option", "security_groups")
    tr = TrainingRequest(job, program, origins, notes, secrets, local_file_systems, mount_script=local and bool(links))
    tr.digest = digest = tr.content_digest()  # before the program's URI, which holds it, is filled in
    prefix = names.job_prefix(ctx.namespace, ctx.release, step.name, digest)
    program_channel = S3Channel(PROGRAM_CHANNEL, program_uri(options, ctx, step.name, digest))
    tr.job = replace(job, training_job_name=names.job_name(prefix, 1), channels=(program_channel, *channels),
                     tags=parts.tags(options, names.job_tags(ctx.namespace, ctx.release, step.name, 1, digest)))
    origins["Tags"] = ("option", "tags")
    return tr


def _remote(env: dict[str, str] | None) -> dict[str, str]:
    """Earlier steps' outputs without what names this machine's paths."""
    return {k: v for k, v in (env or {}).items() if k not in HOST_ONLY_ENV}


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _link(channel: str, mount_path: str) -> str:
    """The shell line that shows a file-system channel at a pvc's mount path in a SageMaker container: a link (the
    container's root file system is its own)."""
    parent = _parent(mount_path)
    mkdir = f"mkdir -p {shlex.quote(parent)} && " if parent != "/" else ""
    return f"{mkdir}ln -sfn {shlex.quote(channel)} {shlex.quote(mount_path)}"


def _bind_line(links: list[tuple[str, str]]) -> str:
    """Mode local: the shell line that binds each file-system channel at its pvc's mount path with the mount script
    from the ``mlrecipe`` channel. A local host's root is its own (a tmpfs whose entries are this machine's
    directories), so a missing mount point is made there only, one below an existing directory (``/mnt/data``) in a
    copy of that directory; the step stops when one cannot be made."""
    pairs = " ".join(shlex.quote(p) for pair in links for p in pair)
    return f"sh {CHANNEL_ROOT}/{PROGRAM_CHANNEL}/{MOUNT_SCRIPT_FILE} inside {pairs} -- || exit $?"


def local_file_system(pvc: str) -> FileSystem:
    """The file system that stands for the local volume of ``pvc`` in mode local: its id (``fs-`` and hex digits, as
    SageMaker's pattern wants) is derived from the pvc's name; :func:`register_local_file_system` makes the volume's
    directory the local mode's file system of that id when the job is created."""
    digest = hashlib.sha256(pvc.encode()).hexdigest()[:17]
    return FileSystem(id=f"fs-{digest}", type="EFS" if "efs" in pvc.lower() else "FSxLustre")


def register_local_file_system(file_systems_root: Path, fs_id: str, directory: Path) -> None:
    """Make ``directory`` the local mode's file system ``fs_id`` (``file_systems_root/<id>`` links to it)."""
    directory.mkdir(parents=True, exist_ok=True)
    file_systems_root.mkdir(parents=True, exist_ok=True)
    entry = file_systems_root / fs_id
    if entry.is_symlink() and Path(os.readlink(entry)) == directory:
        return
    tmp = file_systems_root / f".{fs_id}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(directory, target_is_directory=True)
    os.replace(tmp, entry)


def _environment(step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None,
                 origins: dict[str, Origin]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Environment: earlier steps' outputs, the recipe's env and the contract's fixed part; credential-like
    variables of the recipe are refused (they would be visible in DescribeTrainingJob)."""
    out = dict(env or {})
    origins["Environment"] = ("recipe", f"{step.chart.block}.env")
    values, refused = parts.recipe_environment(step, ctx)
    out.update(values)
    skipped = {i for i, _ in refused}
    index = {entry.name: i for i, entry in enumerate(step.block.env) if i not in skipped}
    for name in values:
        origins[f"Environment.{name}"] = ("recipe", f"{step.chart.block}.env[{index[name]}].value")
    out.update({k: v for k, v in contract_env(step, ctx).items() if k != METRICS_VAR})
    return out, [(name, f"{step.chart.block}.env[{i}].value") for i, name in refused]
