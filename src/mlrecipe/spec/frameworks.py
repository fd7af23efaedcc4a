"""What a framework is, in one table: the registry every other view of ``framework:`` is derived from.

A recipe's ``framework:`` (or its chart's default) names an entry of :data:`FRAMEWORKS`: the script trees the charts
ship for it (``scripts/<framework>/``, generated from :mod:`mlrecipe_scripts`), the Python packages its scripts
import, and the pipeline checks it registers (Megatron's: a training blend may name only shards a data step writes).
Each package names the environment whose ``make`` target installs it (:data:`ENVIRONMENTS`, as the Makefile builds
them), and each environment the container images that host backends run in it. From these facts:

- the host backends' check of a step's environment before it starts (:mod:`mlrecipe.backends.host.framework_needs`)
  and the image -> environment map (:mod:`mlrecipe.backends.host.images`);
- ``doctor``'s package checks of a recipe (:mod:`mlrecipe.infra.doctor.requirements`) and the hint that names the
  ``make`` target of a missing package;
- the pipeline checks of :func:`mlrecipe.spec.load.load_pipeline`;
- the scripts layout of :mod:`mlrecipe_scripts.layout`, a separate shipped package that cannot import this one: a
  test (``tests/unit/test_framework_registry.py``) fails while its trees differ from :attr:`Framework.trees`.

Plain data, imported by ``validate`` and ``--help``: nothing heavy here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlrecipe.spec.megatron_blend import blend_issues

if TYPE_CHECKING:
    from mlrecipe.spec.errors import SpecIssue
    from mlrecipe.spec.load import ReleaseSpec

PipelineCheck = Callable[["ReleaseSpec"], "list[SpecIssue]"]


@dataclass(frozen=True)
class Environment:
    """A Python environment ``make`` builds beside the CLI's own (``.venv``), and the images mapped to it."""

    folder: str  #: beside the CLI's environment: ``<dir of sys.prefix>/<folder>``
    make_target: str
    images: tuple[str, ...]  #: image patterns whose steps run in it by default (when it exists)
    images_label: str  #: those images, in words
    installs: tuple[str, ...]  #: import names its make target installs


CLI_ENV = Environment(".venv", "venv", (), "images without a mapping of their own", (
    "torch", "numpy", "transformers", "accelerate", "safetensors", "lightning", "sklearn", "peft", "datasets",
    "tensorboard", "ray", "kubernetes", "jupyterlab", "boto3", "zstandard", "tokenizers", "megatron", "mlrecipe"))
SERVING_ENV = Environment(".venv-vllm", "serve-env",
                          ("vllm/vllm-openai*", "rayproject/ray*", "anyscale/ray*", "*/vllm-openai*"),
                          "vLLM and Ray images", ("torch", "numpy", "vllm", "ray", "peft", "datasets", "mlrecipe"))
TRITON_ENV = Environment(".venv-triton", "triton-env",
                         ("nvcr.io/nvidia/tritonserver*", "*/tritonserver*", "tritonserver*"),
                         "tritonserver images", ("torch", "numpy", "pytriton", "transformers", "mlrecipe"))
NEMO_ENV = Environment(".venv-nemo2", "nemo2-env", ("nvcr.io/nvidia/nemo:*", "*/nemo:*", "nemo:*"), "NeMo images",
                       ("nemo", "nemo_run", "mlrecipe"))
#: In the order images are matched (the first environment whose pattern matches wins).
ENVIRONMENTS = (TRITON_ENV, NEMO_ENV, SERVING_ENV, CLI_ENV)


def image_environment(image: str) -> Environment | None:
    """The environment a container image runs in by default (the first whose patterns match), or None."""
    import fnmatch

    return next((env for env in ENVIRONMENTS if any(fnmatch.fnmatch(image, p) for p in env.images)), None)


@dataclass(frozen=True)
class Package:
    """A Python package: the name ``import`` uses, what ``pip install`` takes, and the environment that has it."""

    module: str
    pip: str
    home: Environment | None  #: whose make target installs it (None: no environment of the project does)

    @property
    def distribution(self) -> str:
        """The distribution whose version ``doctor`` reports (``ray[serve]`` -> ``ray``)."""
        return self.pip.split("[")[0].split(" ")[0]


_PACKAGES = (
    Package("torch", "torch", CLI_ENV), Package("numpy", "numpy", CLI_ENV),
    Package("transformers", "transformers", CLI_ENV), Package("accelerate", "accelerate", CLI_ENV),
    Package("peft", "peft", CLI_ENV), Package("lightning", "lightning", CLI_ENV),
    Package("tensorboard", "tensorboard", CLI_ENV), Package("jupyterlab", "jupyterlab", CLI_ENV),
    Package("zstandard", "zstandard", CLI_ENV), Package("tokenizers", "tokenizers", CLI_ENV),
    Package("megatron", "megatron-core", CLI_ENV),
    Package("ray", "ray[serve]", SERVING_ENV), Package("vllm", "vllm", SERVING_ENV),
    Package("mlrecipe", "mlrecipe (pip install --no-deps -e <checkout>)", SERVING_ENV),
    Package("pytriton", "nvidia-pytriton", TRITON_ENV),
    Package("nemo", "nemo_toolkit[nlp]", NEMO_ENV), Package("nemo_run", "nemo_run", NEMO_ENV),
    Package("mpi4py", "mpi4py", None), Package("deepspeed", "deepspeed", None),
    Package("tensorflow", "tensorflow", None), Package("jax", "jax", None),
    Package("torch_neuronx", "torch-neuronx", None),
)
PACKAGES: dict[str, Package] = {p.module: p for p in _PACKAGES}


def package(module: str) -> Package:
    """The registry's entry for an import name (one installed by ``pip install <module>`` when it has none)."""
    return PACKAGES.get(module) or Package(module, module, None)


def installer(module: str, where: str | None = None) -> Environment | None:
    """The environment whose ``make`` target installs ``module``: ``where`` (an environment's folder name, the one
    being checked) when its target installs it, else the package's home; None when no target installs it."""
    here = next((env for env in ENVIRONMENTS if env.folder == where), None)
    if here is not None and module in here.installs:
        return here
    return package(module).home


@dataclass(frozen=True)
class ScriptTree:
    """A ``scripts/<framework>/`` folder of a chart and the :mod:`mlrecipe_scripts` subpackages it ships."""

    chart: str
    subpackages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Framework:
    """One ``framework:`` value: what its scripts import, the trees the charts ship, the checks it registers."""

    name: str
    imports: tuple[str, ...] = ()  #: what its scripts import as they start: host backends check them before
    trees: tuple[ScriptTree, ...] = ()
    aliases: tuple[str, ...] = ()
    pipeline_checks: tuple[PipelineCheck, ...] = ()  #: each picks the steps it concerns
    uses: tuple[str, ...] = ()  #: what a recipe naming it runs beyond its scripts (doctor checks these too)

    @property
    def doctor_packages(self) -> tuple[str, ...]:
        """The packages ``doctor`` checks for a recipe that names this framework."""
        return tuple(dict.fromkeys((*self.imports, *self.uses)))


_PL = "training/pytorchjob-distributed"
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("accelerate", ("torch", "accelerate", "peft", "transformers"),
              (ScriptTree(_PL, ("core", "hf_trainer", "accelerate")),)),
    Framework("pytorch_lightning", ("torch", "lightning", "transformers"),
              (ScriptTree(_PL, ("core", "lightning_core", "pytorch_lightning")),)),
    Framework("nemo2", ("nemo", "nemo_run"), (ScriptTree(_PL, ("core", "lightning_core", "nemo2")),)),
    Framework("ray_train", ("ray", "transformers"),
              (ScriptTree("training/raytrain", ("core", "hf_trainer", "ray_train")),)),
    Framework("megatron", ("numpy", "tokenizers", "zstandard"),
              (ScriptTree("data-prep/mpijob-data-process", ("core", "megatron")),
               ScriptTree(_PL, ("core", "megatron"))),
              pipeline_checks=(blend_issues,)),
    Framework("encoder_transformers", ("transformers",),
              (ScriptTree("serving/triton-inference-server", ("encoder_transformers",)),)),
    # folders vllm-<version>: one Ray Serve application a serve config may name (the chart's default, also for apps
    # of the recipe's own that need no vLLM: its host check is the chart's, ray)
    Framework("vllm", trees=(ScriptTree("serving/rayserve"),), uses=("vllm",)),
    # No scripts of the project: what a recipe naming them runs.
    Framework("pytorch", aliases=("torch",), uses=("torch",)),
    Framework("deepspeed", uses=("torch", "deepspeed")),
    Framework("transformers", uses=("torch", "transformers"), trees=(ScriptTree("data-prep/data-process"),)),
    Framework("mpi", aliases=("horovod",), uses=("mpi4py",)),
    Framework("ray", uses=("ray",)),
    Framework("tensorflow", uses=("tensorflow",)),
    Framework("jax", uses=("jax",)),
    Framework("neuron", aliases=("neuronx",), uses=("torch_neuronx",)),
)}
_ALIASES = {alias: f for f in FRAMEWORKS.values() for alias in (f.name, *f.aliases)}


def lookup(name: str | None) -> Framework | None:
    """The entry ``name`` selects: by name or alias (any case), else by the name up to its first ``-``
    (``vllm-0.19.0`` is ``vllm``, as a chart's templates find its folder); None for an unknown or empty name."""
    key = (name or "").strip().lower()
    if not key:
        return None
    return _ALIASES.get(key) or _ALIASES.get(key.split("-", 1)[0])


def imports_of(name: str | None) -> tuple[str, ...]:
    """The import names framework ``name``'s scripts need as they start (none for an unknown framework)."""
    found = lookup(name)
    return found.imports if found is not None else ()


def doctor_packages_of(name: str | None) -> tuple[str, ...]:
    """The packages ``doctor`` checks for a recipe naming framework ``name`` (none for an unknown framework)."""
    found = lookup(name)
    return found.doctor_packages if found is not None else ()


def pipeline_checks() -> list[PipelineCheck]:
    """Every pipeline check the frameworks register, in registry order."""
    return [check for f in FRAMEWORKS.values() for check in f.pipeline_checks]
