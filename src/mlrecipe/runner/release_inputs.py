"""What a release was started from, typed: a pipeline file (``mlrecipe run``) or one chart with recipe files
(``mlrecipe install``).

The release's state record keeps them as a JSON object whose ``kind`` says which (:meth:`record`, byte for byte what
earlier versions wrote); :func:`release_inputs` reads one back, older records included. The recorder's own keys
(``backend_opts``, ``secret_sets``: :mod:`mlrecipe.runner.recorded_inputs`) ride beside these and are not part of
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from mlrecipe.spec.load import ReleaseSpec, load_pipeline, load_step_release

__all__ = ["InstallInputs", "PipelineInputs", "ReleaseInputs", "release_inputs"]


@dataclass(frozen=True)
class PipelineInputs:
    """``mlrecipe run PIPELINE``: the pipeline file (absolute) and the ``--set`` expressions, as given."""

    path: str
    sets: tuple[str, ...] = ()

    KIND: ClassVar[str] = "pipeline"

    def load(self) -> ReleaseSpec:
        """The release these inputs give now (the files are read again)."""
        return load_pipeline(self.path, list(self.sets))

    def record(self) -> dict[str, Any]:
        """The JSON object the state record keeps."""
        return {"kind": self.KIND, "path": self.path, "sets": list(self.sets)}


@dataclass(frozen=True)
class InstallInputs:
    """``mlrecipe install RELEASE CHART -f FILE...``: the recipe files (absolute, and as named on the command line,
    for messages), the ``--set`` expressions and the namespace."""

    release: str
    chart: str
    files: tuple[str, ...]
    given: tuple[str, ...] | None = None
    sets: tuple[str, ...] = ()
    namespace: str = "default"

    KIND: ClassVar[str] = "install"

    def load(self) -> ReleaseSpec:
        """The release these inputs give now (the files are read again)."""
        return load_step_release(self.release, self.chart, list(self.files), list(self.sets), self.namespace,
                                 shown_files=None if self.given is None else list(self.given))

    def record(self) -> dict[str, Any]:
        """The JSON object the state record keeps."""
        return {"kind": self.KIND, "release": self.release, "chart": self.chart, "files": list(self.files),
                "given": list(self.given or ()), "sets": list(self.sets), "namespace": self.namespace}


ReleaseInputs = PipelineInputs | InstallInputs


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value or ())


def release_inputs(recorded: Mapping[str, Any]) -> ReleaseInputs:
    """The typed inputs of a recorded JSON object: ``kind: pipeline``, else a one-step install (as always read)."""
    if recorded["kind"] == PipelineInputs.KIND:
        return PipelineInputs(str(recorded["path"]), _strings(recorded.get("sets")))
    given = recorded.get("given")
    return InstallInputs(str(recorded["release"]), str(recorded["chart"]), _strings(recorded["files"]),
                         None if given is None else _strings(given), _strings(recorded.get("sets")),
                         str(recorded["namespace"]))
