"""Build step of the package: the chart library and the examples go into the wheel as real files.

The repository's charts reach the library chart and the step runtime through symlinks (so that a plain
``helm install`` from a checkout works); the wheel gets copies with every link resolved, under
``mlrecipe/_data/`` (:func:`mlrecipe.helm.render.charts_root` finds them there). Editable installs use the
checkout's own tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = {"charts/machine-learning": "charts/machine-learning", "examples": "examples"}


class BuildPyWithCharts(build_py):
    """``build_py`` plus the charts and examples, symlinks resolved into real files."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "mlrecipe" / "_data"
        for source, dest in DATA.items():
            shutil.rmtree(target / dest, ignore_errors=True)
            shutil.copytree(ROOT / source, target / dest, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithCharts})
