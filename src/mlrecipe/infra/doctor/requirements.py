"""What a recipe (or pipeline) needs from a backend, read from its YAML (through the hardened loader of the spec).

Packages come from the ``framework:`` key (what the framework registry, :mod:`mlrecipe.spec.frameworks`, says its
scripts import), the structured ``launcher``, the ``ray`` / ``mpirun`` /
``engine`` blocks and the words of the command blocks (torchrun -> torch, accelerate -> accelerate,
mpirun -> mpi4py and the mpirun binary, ray -> ray, vllm -> vllm); resources, node type and claims
from ``resources`` and ``pvc``; Kubernetes operators from the step's chart and launcher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.errors import RecipeInputError, SpecError
from mlrecipe.spec import frameworks

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
NEURON_RESOURCES = ("aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "aws.amazon.com/neurondevice")
ACCELERATOR_RESOURCES = (GPU, EFA, *NEURON_RESOURCES)
DEFAULT_PVCS = (("pv-fsx", "/fsx"), ("pv-efs", "/efs"))


@dataclass
class Requirements:
    """The union of what every step needs (per-node resources are the maximum over steps)."""

    source: Path | None = None
    packages: list[str] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    node_types: list[str] = field(default_factory=list)
    resources: dict[str, int] = field(default_factory=dict)
    nnodes: int = 1
    nproc_per_node: int = 1
    pvcs: list[tuple[str, str]] = field(default_factory=list)
    ebs: bool = False
    operators: list[str] = field(default_factory=list)

    @property
    def from_recipe(self) -> bool:
        return self.source is not None

    def add(self, other: Requirements) -> None:
        """Merge ``other`` into this one."""
        for name in ("packages", "binaries", "images", "node_types", "pvcs", "operators"):
            mine = getattr(self, name)
            mine.extend(x for x in getattr(other, name) if x not in mine)
        for key, value in other.resources.items():
            self.resources[key] = max(self.resources.get(key, 0), value)
        self.nnodes = max(self.nnodes, other.nnodes)
        self.nproc_per_node = max(self.nproc_per_node, other.nproc_per_node)
        self.ebs = self.ebs or other.ebs


def _quantity(value: Any) -> int:
    """Count of an extended resource ("8", 8, "8.0"); non-numbers count as 0."""
    try:
        return int(float(str(value).strip()))
    except ValueError:
        return 0


def _words(recipe: dict[str, Any]) -> list[str]:
    words: list[str] = []
    for key in ("train", "process", "server"):
        block = recipe.get(key)
        if isinstance(block, dict):
            for part in ("command", "args"):
                items = block.get(part) or []
                items = [items] if isinstance(items, str) else items
                for item in items:
                    words.extend(re.split(r"[\s;&|()'\"=]+", str(item)))
    for key in ("inline_script", "pre_script"):
        items = recipe.get(key) or []
        for item in [items] if isinstance(items, str) else items:
            words.extend(re.split(r"[\s;&|()'\"=]+", str(item)))
    return [Path(w).name if "/" in w else w for w in words if w]


def _packages_from_words(words: list[str]) -> tuple[list[str], list[str]]:
    packages: list[str] = []
    binaries: list[str] = []
    text = " ".join(words)
    if "torchrun" in words or "torch.distributed.run" in words or "torch.distributed.launch" in words:
        packages.append("torch")
    if re.search(r"\baccelerate launch\b", text):
        packages += ["torch", "accelerate"]
    if "mpirun" in words or "mpiexec" in words:
        packages.append("mpi4py")
        binaries.append("mpirun")
    if re.search(r"\bray (start|job|submit)\b", text) or re.search(r"\bserve (run|deploy)\b", text):
        packages.append("ray")
    if "vllm" in words or any(w.startswith("vllm.") for w in words):
        packages.append("vllm")
    if "deepspeed" in words:
        packages += ["torch", "deepspeed"]
    return packages, binaries


def _operators_for(chart: str | None, packages: list[str], recipe: dict[str, Any]) -> list[str]:
    name = (chart or "").lower()
    ops: list[str] = []
    if "pytorchjob" in name or (not name and "torch" in packages):
        ops.append("pytorchjob")
    if "mpi" in name or (not name and "mpi4py" in packages):
        ops.append("mpijob")
    if "rayservice" in name or "ray-serve" in name:
        ops.append("rayservice")
    elif "ray" in name or (not name and ("ray" in packages or recipe.get("ray"))):
        ops.append("rayjob")
    if "lws" in name:
        ops.append("lws")
    return ops


def requirements_of_recipe(recipe: dict[str, Any], chart: str | None = None) -> Requirements:
    """Requirements of one recipe mapping (a step's values)."""
    req = Requirements()
    packages: list[str] = []
    binaries: list[str] = []
    packages += frameworks.doctor_packages_of(str(recipe.get("framework") or ""))
    launcher = recipe.get("launcher")
    if isinstance(launcher, dict):
        kind = str(launcher.get("type", ""))
        packages += {"torchrun": ["torch"], "accelerate": ["torch", "accelerate"], "mpirun": ["mpi4py"]}.get(kind, [])
        if kind == "mpirun":
            binaries.append("mpirun")
    if isinstance(recipe.get("ray"), dict):
        packages.append("ray")
    if isinstance(recipe.get("mpirun"), dict):
        packages.append("mpi4py")
        binaries.append("mpirun")
    engine = recipe.get("engine")
    if isinstance(engine, dict) and "vllm" in " ".join(str(v) for v in engine.values()).lower():
        packages.append("vllm")
    more_packages, more_binaries = _packages_from_words(_words(recipe))
    packages += more_packages
    binaries += more_binaries
    req.packages = list(dict.fromkeys(packages))
    req.binaries = list(dict.fromkeys(binaries))
    image = recipe.get("image")
    image = image.get("name") if isinstance(image, dict) else image
    if image:
        req.images = [str(image)]

    resources = recipe.get("resources") or {}
    if isinstance(resources, dict):
        for section in ("requests", "limits"):
            for key, value in (resources.get(section) or {}).items():
                if key in ACCELERATOR_RESOURCES:
                    req.resources[key] = max(req.resources.get(key, 0), _quantity(value))
        node_type = resources.get("node_type") or resources.get("node_instance_type")
        if node_type:
            req.node_types = [str(node_type)]
        req.nnodes = max(1, _quantity(resources.get("nnodes") or resources.get("num_nodes") or 1))
        req.nproc_per_node = max(1, _quantity(resources.get("nproc_per_node") or 1))
    req.resources = {k: v for k, v in req.resources.items() if v > 0}

    pvcs = recipe.get("pvc")
    if pvcs is None:
        req.pvcs = list(DEFAULT_PVCS)
    else:
        items = [pvcs] if isinstance(pvcs, dict) else pvcs
        req.pvcs = [
            (str(p["name"]), str(p.get("mount_path", ""))) for p in items if isinstance(p, dict) and p.get("name")
        ]
    req.ebs = bool(recipe.get("ebs"))
    req.operators = _operators_for(chart, req.packages, recipe)
    return req


def _read_yaml(path: Path) -> Any:
    """The file's data through the hardened loader (alias bombs, depth and size are refused)."""
    from mlrecipe.spec.yamlfile import load_yaml

    if not path.is_file():
        raise RecipeInputError(f"recipe file not found: {path}")
    try:
        return load_yaml(path).data
    except SpecError as exc:
        raise RecipeInputError(f"cannot read recipe file {path}: {exc}") from None


def load_requirements(path: Path) -> Requirements:
    """Requirements of a recipe file, or of every step of a pipeline file (``steps:``)."""
    path = Path(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise RecipeInputError(f"recipe file {path} does not hold a mapping")
    total = Requirements(source=path)
    if isinstance(data.get("steps"), list):
        for i, step in enumerate(data["steps"]):
            if not isinstance(step, dict):
                raise RecipeInputError(f"{path}: steps[{i}] is not a mapping")
            recipe = step.get("recipe") or step.get("values") or {}
            if isinstance(recipe, str):
                recipe_path = (path.parent / recipe).resolve()
                recipe = _read_yaml(recipe_path)
            if not isinstance(recipe, dict):
                raise RecipeInputError(f"{path}: steps[{i}].recipe is not a mapping")
            total.add(requirements_of_recipe(recipe, step.get("chart")))
    else:
        total.add(requirements_of_recipe(data, data.get("chart") if isinstance(data.get("chart"), str) else None))
    return total
