"""Image -> Python environment: how host backends run a step whose recipe names a container image.

No container engine is used: an image maps to a Python environment (a venv prefix) whose ``bin`` goes
first on the step's ``PATH``; an unmapped image runs in the CLI's own environment.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

IMAGES_VAR = "MLRECIPE_IMAGES"  # "image=venv-prefix,image2=prefix2": wins over the configured map


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
            return PythonEnvironment(None), self.unmapped_note.format(image=image)
        return PythonEnvironment(Path(prefix).expanduser()), self.mapped_note.format(image=image, prefix=prefix)
