"""Where the chart library and the examples are: in the installed package, else in the source tree."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DATA = Path(__file__).resolve().parent / "_data"
SOURCE_TREE = Path(__file__).resolve().parents[2]


def data_dir(name: str) -> Path:
    """``charts`` or ``examples``: ``mlrecipe/_data/<name>`` in a wheel install (links resolved by the build),
    else ``<checkout>/<name>`` (a checkout or an editable install)."""
    packaged = PACKAGE_DATA / name
    return packaged if packaged.is_dir() else SOURCE_TREE / name
