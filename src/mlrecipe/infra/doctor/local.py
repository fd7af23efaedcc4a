"""Checks for the local backend: Python packages of the recipe's framework in the interpreter that
runs it, binaries (mpirun), GPUs, the local volume root, and the tools local volumes need."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mlrecipe.backends.local import LocalOptions
from mlrecipe.infra.doctor.base import Check, CheckResult
from mlrecipe.infra.doctor.probes import nvidia_gpus
from mlrecipe.infra.doctor.requirements import GPU, NEURON_RESOURCES, Requirements
from mlrecipe.spec import frameworks

BINARY_HINTS = {
    "mpirun": "apt-get install openmpi-bin libopenmpi-dev (Open MPI), then pip install mpi4py",
}
# Probed in the target interpreter: {module: version or null} without importing the packages.
_PROBE = (
    "import importlib.util, importlib.metadata, json, sys\n"
    "out = {}\n"
    "for mod, dist in json.loads(sys.argv[1]).items():\n"
    "    if importlib.util.find_spec(mod) is None:\n"
    "        out[mod] = None\n"
    "        continue\n"
    "    try:\n"
    "        out[mod] = importlib.metadata.version(dist)\n"
    "    except importlib.metadata.PackageNotFoundError:\n"
    "        out[mod] = 'unknown version'\n"
    "print(json.dumps(out))\n"
)


def volume_root() -> Path:
    """Where local volumes live: ``local.root`` in the config, else ``$MLRECIPE_HOME/volumes``."""
    from mlrecipe.config import default_volume_root
    from mlrecipe.errors import MlrecipeError

    try:
        return _local_options().volume_root()
    except MlrecipeError:  # an unreadable config must not hide the other checks
        return default_volume_root()


def _local_options() -> LocalOptions:
    from mlrecipe.backends.options import load_options

    return load_options(LocalOptions, "local")


def interpreter_for(images: list[str]) -> Path:
    """The Python that runs the recipe locally: the environment mapped to its image in ``local.images`` (config),
    else the environment the framework registry maps the image to where it exists beside the CLI's
    (``.venv-nemo2`` for NeMo images ...), else this interpreter -- the local backend's rule."""
    from mlrecipe.errors import MlrecipeError

    try:
        mapping = _local_options().images
    except MlrecipeError:
        mapping = {}
    for image in images:
        if image in mapping:
            return Path(mapping[image]).expanduser() / "bin" / "python"
        known = frameworks.image_environment(image)
        python = Path(sys.prefix).parent / known.folder / "bin" / "python" if known is not None else None
        if python is not None and python.exists():
            return python
    return Path(sys.executable)


def probe_packages(python: Path, modules: list[str]) -> dict[str, str | None]:
    """Installed version (or None) of each module, as seen by ``python``."""
    query = {m: frameworks.package(m).distribution for m in modules}
    proc = subprocess.run(
        [str(python), "-c", _PROBE, json.dumps(query)], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{python} could not be run: {proc.stderr.strip()[:200]}")
    return json.loads(proc.stdout)


def _interpreter_check(python: Path) -> Check:
    def probe() -> CheckResult:
        try:
            proc = subprocess.run(
                [str(python), "-c", "import sys; print(*sys.version_info[:3], sep='.')"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError as exc:
            return CheckResult.failed(f"{python} cannot run: {exc}", "fix local.images in $MLRECIPE_HOME/config.yaml")
        version = proc.stdout.strip()
        if proc.returncode != 0 or not version:
            return CheckResult.failed(f"{python} failed: {proc.stderr.strip()[:200]}", "repair that environment")
        if tuple(int(x) for x in version.split(".")[:2]) < (3, 10):
            return CheckResult.failed(f"{python} is Python {version}", "use a Python 3.10+ environment")
        return CheckResult.passed(f"Python {version} ({python})")

    return Check("python interpreter", True, probe)


def install_hint(module: str, python: Path) -> str:
    """How to install ``module`` for ``python``: the ``make`` target whose environment has it (the registry's), then
    pip in that interpreter."""
    where = frameworks.CLI_ENV.folder if python == Path(sys.executable) else python.parent.parent.name
    home = frameworks.installer(module, where)
    pip = f"{python} -m pip install '{frameworks.package(module).pip}'"
    return f"make {home.make_target} (the environment {home.folder}), or {pip}" if home is not None else pip


def _package_check(module: str, python: Path, cache: dict[str, str | None], required: bool) -> Check:
    def probe() -> CheckResult:
        if module not in cache:
            cache.update(probe_packages(python, [module]))
        version = cache.get(module)
        if version:
            return CheckResult.passed(f"{module} {version} in {python}")
        why = "needed by the recipe" if required else "needed by recipes that use it"
        return CheckResult.failed(f"{module} is not installed in {python} ({why})", install_hint(module, python))

    return Check(f"python package {module}", required, probe)


def _binary_check(name: str) -> Check:
    def probe() -> CheckResult:
        path = shutil.which(name)
        if path:
            return CheckResult.passed(f"{name} at {path}")
        return CheckResult.failed(f"{name} is not on PATH", BINARY_HINTS.get(name, f"install {name}"))

    return Check(f"binary {name}", True, probe)


def _gpu_check(req: Requirements) -> Check:
    per_node = req.resources.get(GPU, 0)
    needed = per_node * req.nnodes

    def probe() -> CheckResult:
        gpus, problem = nvidia_gpus()
        if needed == 0:
            found = f"{len(gpus)} NVIDIA GPU(s): {', '.join(sorted(set(gpus)))}" if gpus else "no NVIDIA GPU"
            return CheckResult.passed(f"{found}; the recipe runs on CPU" if req.from_recipe else found)
        if len(gpus) >= needed:
            return CheckResult.passed(f"{len(gpus)} GPU(s) >= {needed} needed ({per_node}/node x {req.nnodes} nodes)")
        detail = f"{len(gpus)} NVIDIA GPU(s) here, the recipe asks for {needed} ({per_node}/node x {req.nnodes})"
        if problem:
            detail += f": {problem}"
        return CheckResult.failed(
            detail, "run on a GPU machine (NVIDIA driver + nvidia-smi), or lower resources.requests nvidia.com/gpu"
        )

    return Check("GPUs", needed > 0, probe)


def _neuron_check(req: Requirements) -> Check:
    def probe() -> CheckResult:
        devices = sorted(Path("/dev").glob("neuron[0-9]*"))
        if devices:
            return CheckResult.passed(f"{len(devices)} Neuron device(s)")
        return CheckResult.failed(
            "no /dev/neuron* device: the recipe asks for AWS Neuron",
            "run on a trn1/trn2/inf2 instance with the Neuron driver",
        )

    return Check("Neuron devices", True, probe)


def _volume_root_check() -> Check:
    def probe() -> CheckResult:
        root = volume_root()
        try:
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
                pass
        except OSError as exc:
            return CheckResult.failed(
                f"volume root {root} is not writable: {exc.strerror or exc}",
                "set MLRECIPE_HOME (or local.root in $MLRECIPE_HOME/config.yaml) to a writable directory",
            )
        free = shutil.disk_usage(root).free / 2**30
        return CheckResult.passed(f"{root} writable, {free:.1f} GiB free")

    return Check("volume root writable", True, probe)


def _mounts_check(req: Requirements) -> Check:
    def probe() -> CheckResult:
        from mlrecipe.backends.local import Mount, mount_problems
        from mlrecipe.errors import MlrecipeError

        try:
            mode = _local_options().volumes
        except MlrecipeError as exc:
            return CheckResult.failed(
                f"cannot read the local backend settings: {exc}", "fix $MLRECIPE_HOME/config.yaml"
            )
        if mode == "none":
            return CheckResult.passed("local.volumes: none (recipes see the real paths)")
        root = volume_root()
        problems = mount_problems([Mount(root / name, path) for name, path in req.pvcs])
        if problems:
            return CheckResult.failed("; ".join(problems), problems[0].split(": ", 1)[-1])
        paths = ", ".join(path for _, path in req.pvcs) or "none"
        return CheckResult.passed(f"bind mounts of {paths} from {root} are possible")

    return Check("local volume mounts", bool(req.pvcs), probe)


def _cpu_check(req: Requirements) -> Check:
    procs = req.nnodes * req.nproc_per_node

    def probe() -> CheckResult:
        cores = os.cpu_count() or 1
        if procs <= cores:
            return CheckResult.passed(f"{cores} CPU cores for {procs} process(es)")
        return CheckResult.failed(
            f"{procs} processes ({req.nnodes} nodes x {req.nproc_per_node}) on {cores} cores will oversubscribe",
            "lower resources.nnodes / nproc_per_node for local runs",
        )

    return Check("CPU cores", False, probe)


def checks(req: Requirements) -> list[Check]:
    """The local backend's checks for ``req`` (an empty Requirements: a general preflight)."""
    python = interpreter_for(req.images)
    cache: dict[str, str | None] = {}
    out = [_interpreter_check(python)]
    modules = req.packages if req.from_recipe else ["torch"]
    out += [_package_check(m, python, cache, required=req.from_recipe) for m in modules]
    out += [_binary_check(b) for b in req.binaries]
    out.append(_gpu_check(req))
    if any(req.resources.get(r, 0) for r in NEURON_RESOURCES):
        out.append(_neuron_check(req))
    out.append(_volume_root_check())
    if req.from_recipe:
        out.append(_mounts_check(req))
        out.append(_cpu_check(req))
    return out
