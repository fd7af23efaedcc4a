"""Image -> Python environment: how host backends run a step whose recipe names a container image.

No container engine is used: an image maps to a Python environment (a venv prefix) whose ``bin`` goes
first on the step's ``PATH``. The map is the backend's ``images`` option, then ``$MLRECIPE_IMAGES``; images
the project knows map by default to the environments ``make`` creates beside the CLI's own: vLLM's and Ray's to
``.venv-vllm`` (``make serve-env``), Triton's to ``.venv-triton`` (``make triton-env``), NeMo's to ``.venv-nemo2``
(``make nemo2-env``); any other image (PyTorch's included) runs in the CLI's own environment.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mlrecipe.spec import frameworks

IMAGES_VAR = "MLRECIPE_IMAGES"  # "image=venv-prefix,image2=prefix2": wins over the configured map
# The environments and their images are the framework registry's (mlrecipe.spec.frameworks): names kept for callers.
SERVING_ENV = frameworks.SERVING_ENV.folder  # made by `make serve-env` beside the CLI's environment
#: Image patterns whose steps run in the serving environment when it exists (vLLM, Ray Serve).
SERVING_IMAGES = frameworks.SERVING_ENV.images
#: Triton's environment (`make triton-env`): Debian's Python, nvidia-pytriton's real tritonserver, torch, transformers.
TRITON_ENV = frameworks.TRITON_ENV.folder
TRITON_IMAGES = frameworks.TRITON_ENV.images
#: NeMo 2's environment (`make nemo2-env`): NeMo and NeMo-Run on top of the CLI's environment.
NEMO_ENV = frameworks.NEMO_ENV.folder
NEMO_IMAGES = frameworks.NEMO_ENV.images


def serving_environment(name: str = SERVING_ENV) -> Path | None:
    """The environment ``name`` beside the CLI's own (``<dir of sys.prefix>/.venv-vllm``), if it exists."""
    candidate = Path(sys.prefix).parent / name
    return candidate if (candidate / "bin" / "python").exists() else None


def known_images() -> dict[str, Path]:
    """Image pattern -> environment for the images the project knows, where their environment exists."""
    known: dict[str, Path] = {}
    for environment in frameworks.ENVIRONMENTS:
        env = serving_environment(environment.folder) if environment.images else None
        if env is not None:
            known.update({pattern: env for pattern in environment.images})
    return known


@dataclass(frozen=True)
class PythonEnvironment:
    """Where a step's programs come from: a venv prefix (``None``: the CLI's own environment)."""

    prefix: Path | None

    @property
    def bin_dir(self) -> Path:
        return self.prefix / "bin" if self.prefix is not None else Path(sys.executable).parent

    def env(self) -> dict[str, str]:
        """``VIRTUAL_ENV`` of a mapped environment (``PATH`` is set by each backend its own way)."""
        return {"VIRTUAL_ENV": str(self.prefix)} if self.prefix is not None else {}


@dataclass(frozen=True)
class ImageEnvironments:
    """The image -> environment map of a backend's options, overridden by ``$MLRECIPE_IMAGES``."""

    configured: dict[str, str]
    mapped_note: str = "image {image} runs in the environment {prefix}"
    unmapped_note: str = "image {image} is not pulled: the step runs in the CLI's Python environment"
    known: dict[str, Path] = field(default_factory=dict)  #: image pattern -> environment, used last

    def mapping(self) -> dict[str, str]:
        out = dict(self.configured)
        for item in os.environ.get(IMAGES_VAR, "").split(","):
            image, sep, prefix = item.strip().rpartition("=")
            if sep and image and prefix:
                out[image] = prefix
        return out

    def resolve(self, image: str | None) -> tuple[PythonEnvironment, str | None]:
        """The environment of ``image`` and a note for the user (``None`` when no image is named)."""
        if not image:
            return PythonEnvironment(None), None
        prefix = self.mapping().get(image)
        if prefix is None:
            prefix = next((str(env) for pattern, env in self.known.items() if fnmatch.fnmatch(image, pattern)), None)
        if prefix is None:
            return PythonEnvironment(None), self.unmapped_note.format(image=image)
        return PythonEnvironment(Path(prefix).expanduser()), self.mapped_note.format(image=image, prefix=prefix)


_PROBE = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"


def missing_packages(python: Path, modules: tuple[str, ...]) -> list[str]:
    """The import names among ``modules`` that ``python`` cannot find (all of them if it does not run)."""
    import subprocess

    if not modules:
        return []
    try:
        done = subprocess.run([str(python), "-c", _PROBE, *modules], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return list(modules)
    return done.stdout.split() if done.returncode == 0 else list(modules)


def environment_problems(env: PythonEnvironment, modules: tuple[str, ...], what: str) -> list[str]:
    """Why ``env`` cannot run ``what`` (a chart): each missing package, with the command that installs it."""
    python = env.bin_dir / "python"
    missing = missing_packages(python if python.exists() else Path(sys.executable), modules)
    where = str(env.prefix) if env.prefix is not None else f"the CLI's environment ({sys.prefix})"
    pip = env.bin_dir / "pip"
    out = []
    for m in missing:
        home = frameworks.installer(m, env.prefix.name if env.prefix is not None else frameworks.CLI_ENV.folder)
        make = (f"run 'make {home.make_target}' (the environment {home.folder} that {home.images_label} map to), or "
                if home is not None else "run ")
        out.append(f"{what} needs the Python package '{m}', missing in {where}: {make}'{pip} install "
                   f"{frameworks.package(m).pip}', "
                   "or map the step's image to an environment that has it (--backend-opt images.IMAGE=VENV)")
    return out
