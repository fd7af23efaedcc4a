"""Which indexed datasets a pretraining reads, with what weights: a ``--data-path`` blend or a ``manifest.json``.

``--data-path`` is Megatron's: ``PREFIX`` alone, or ``W1 PREFIX1 W2 PREFIX2 ...`` (weights normalized to sum 1); a
relative prefix is taken below ``--data-dir`` when one is given. ``--data-manifest`` reads the data step's manifest
(every prefix, weighted by its token count) and refuses a missing or partial one: every prefix it lists must have its
``.bin`` and ``.idx`` at the recorded sizes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.script_core import ScriptError

MANIFEST_FORMAT = "megatron-indexed-dataset"


@dataclass(frozen=True)
class Blend:
    """Dataset prefixes (``<dir>/<name>``, without ``.bin``/``.idx``) and their normalized weights."""

    prefixes: tuple[str, ...]
    weights: tuple[float, ...]
    eod_id: int | None = None
    vocab_size: int | None = None


def parse_data_path(words: list[str], data_dir: str | None = None) -> Blend:
    """``[PREFIX]`` or ``[W1, PREFIX1, W2, PREFIX2, ...]`` -> a :class:`Blend`; ScriptError on a malformed blend."""
    if not words:
        raise ScriptError("--data-path: no dataset prefix given")
    if len(words) == 1:
        pairs = [(1.0, words[0])]
    else:
        if len(words) % 2:
            raise ScriptError(f"--data-path: expected weight/prefix pairs, got {len(words)} words: {' '.join(words)}")
        pairs = []
        for weight, prefix in zip(words[::2], words[1::2], strict=True):
            try:
                value = float(weight)
            except ValueError:
                raise ScriptError(f"--data-path: '{weight}' is not a weight (expected 'W1 PREFIX1 W2 PREFIX2 ...')"
                                  ) from None
            if value <= 0:
                raise ScriptError(f"--data-path: weight {weight} of {prefix} must be positive")
            pairs.append((value, prefix))
    total = sum(w for w, _ in pairs)
    base = Path(data_dir) if data_dir else None
    prefixes = tuple(str(base / p) if base and not Path(p).is_absolute() else p for _, p in pairs)
    for prefix in prefixes:
        for suffix in (".bin", ".idx"):
            if not Path(prefix + suffix).is_file():
                raise ScriptError(f"--data-path: {prefix}{suffix} does not exist")
    return Blend(prefixes, tuple(w / total for w, _ in pairs))


def read_manifest(path: str) -> Blend:
    """The data step's manifest -> every prefix weighted by its tokens; ScriptError when missing or partial."""
    file = Path(path)
    if not file.is_file():
        raise ScriptError(f"{file}: no manifest (the data preparation did not finish, or wrote elsewhere)")
    try:
        data: Any = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ScriptError(f"{file}: not a readable manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format", MANIFEST_FORMAT) != MANIFEST_FORMAT:
        raise ScriptError(f"{file}: not a Megatron data manifest")
    entries = data.get("prefixes")
    if not isinstance(entries, list) or not entries:
        raise ScriptError(f"{file}: the manifest lists no prefixes")
    prefixes, weights = [], []
    for entry in entries:
        name = entry.get("prefix") if isinstance(entry, dict) else None
        if not name:
            raise ScriptError(f"{file}: a manifest entry without 'prefix': {entry!r}")
        prefix = file.parent / name
        for suffix in ("bin", "idx"):
            recorded = entry.get(suffix) if isinstance(entry.get(suffix), dict) else {}
            target = prefix.with_name(prefix.name + f".{suffix}")
            if not target.is_file():
                raise ScriptError(f"{file}: partial data: {target.name} is missing")
            size = recorded.get("bytes")
            if size is not None and target.stat().st_size != size:
                raise ScriptError(f"{file}: partial data: {target.name} has {target.stat().st_size} bytes, the "
                                  f"manifest records {size}")
        prefixes.append(str(prefix))
        weights.append(float(entry.get("tokens") or 1))
    total = sum(weights)
    tokenizer = data.get("tokenizer")
    if not isinstance(tokenizer, dict):
        tokenizer = {}
    return Blend(tuple(prefixes), tuple(w / total for w in weights), tokenizer.get("eod_id"),
                 tokenizer.get("vocab_size"))
