"""Build step of the package: the chart library and the examples go into the wheel as real files.

The repository's charts reach the library chart and the step runtime through symlinks (so that a plain
``helm install`` from a checkout works); the wheel gets copies with every link resolved, under
``mlrecipe/_data/`` (:func:`mlrecipe.data.data_dir` finds them there). The sdist carries the same resolved
copies (its file list would keep one copy of a linked directory only), so a wheel built from the sdist
(``python -m build``, ``pip install mlrecipe-*.tar.gz``) is complete too. Editable installs use the checkout's
own tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
#: Source tree path -> path under ``mlrecipe/_data`` in the wheel.
DATA = {"charts/machine-learning": "charts/machine-learning", "examples": "examples"}
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def _materialize(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest`` (replacing it), every symlink resolved into a real file or directory."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, symlinks=False, ignore=_IGNORE)


class BuildPyWithCharts(build_py):
    """``build_py`` plus the charts and examples, symlinks resolved into real files."""

    def run(self) -> None:
        editable = getattr(self, "editable_mode", False)
        if not editable:
            # build/lib outlives builds: a module or chart file removed from the source must not ship.
            shutil.rmtree(Path(self.build_lib) / "mlrecipe", ignore_errors=True)
        super().run()
        if editable:
            return
        target = Path(self.build_lib) / "mlrecipe" / "_data"
        for source, dest in DATA.items():
            _materialize(ROOT / source, target / dest)


class SdistWithCharts(sdist):
    """``sdist`` whose ``charts/`` holds each chart's library chart and runtime as real files."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        # The release tree may hard-link the originals: _materialize removes them before it writes.
        _materialize(ROOT / "charts" / "machine-learning", Path(base_dir) / "charts" / "machine-learning")


setup(cmdclass={"build_py": BuildPyWithCharts, "sdist": SdistWithCharts})
