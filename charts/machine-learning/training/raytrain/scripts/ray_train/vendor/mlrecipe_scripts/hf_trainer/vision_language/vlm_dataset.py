"""Vision-language data for the accelerate VLM scripts: the JSONL format, image sources, and preparation of a
Hugging Face (or local) dataset into ``data_dir``.

Format of ``training.jsonl`` / ``validation.jsonl`` / ``test.jsonl`` (one object a line)::

    {"image": "images/cat.jpg", "conversations": [{"from": "human", "value": "<image>\\nWhat is this?"},
                                                  {"from": "gpt", "value": "A cat."}]}

* ``image`` is a local path (relative paths are resolved against the JSONL's directory), an ``http(s)://`` URL, a
  ``data:image/...;base64,...`` URI, or a list of those. It may be missing (a text-only line).
* Each ``<image>`` in a turn is an image slot; images without a tag go to the start of the first human turn.
* Turns are normalised: the role from ``from`` / ``role`` / ``speaker`` (``human|user|question`` -> ``human``,
  ``gpt|assistant|answer|bot`` -> ``gpt``), the text from ``value`` / ``text`` / ``content``.

:func:`prepare_vlm_datasets` (``--hf_dataset_name``): global rank 0 loads the dataset, drops rows without an image,
saves PIL / byte images as ``images/image_%08d.jpg`` under ``data_dir`` (URLs are downloaded the same way),
splits it (``--hf_train_split_ratio`` / ``--hf_val_test_split_ratio``, seeded) and writes the three files plus
``.data_ready`` (into a temporary directory renamed at the end). Other ranks wait for the marker. A ``data_dir``
that already has the marker is used as is. A local directory works as ``--hf_dataset_name``: JSON/JSONL/CSV/Parquet
files (image paths relative to that directory), or an image folder with ``metadata.jsonl``.

``datasets`` and PIL are imported only where needed.
"""

from __future__ import annotations

import base64
import io
import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.common_base import ScriptError, home_dir, log, short_error
from mlrecipe_scripts.hf_trainer.text_dataset import (
    prepare_on_rank_zero,
    split_indices,
    split_percentages,
    staged_data_dir,
)

READY_MARKER = ".data_ready"
SPLIT_FILES = {"train": "training.jsonl", "validation": "validation.jsonl", "test": "test.jsonl"}
HUMAN_ROLES = ("human", "user", "question")
GPT_ROLES = ("gpt", "assistant", "answer", "bot")
DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
URL_RE = re.compile(r"^https?://", re.IGNORECASE)
DOWNLOAD_TIMEOUT = 10


class SampleError(ValueError):
    """A row that cannot be used (bad conversations, unreadable image)."""


@dataclass
class VLMDatasetConfig:
    """Which dataset to prepare and how (the scripts' ``--hf_*`` flags).

    ``load_kwargs`` and ``custom_converter`` (``(row, config, dataset_root, index) -> dict | None``) are not on the
    command line; known datasets get their converter from :data:`CONVERTER_REGISTRY`.
    """

    dataset_name: str
    dataset_config: str | None = None
    split: str = "train"
    max_samples: int | None = None
    train_split_ratio: float = 0.9
    val_test_split_ratio: float = 0.5
    image_field: str = "image"
    conversations_field: str = "conversations"
    download_images: bool = True
    image_output_dir: str = "images"
    num_proc: int = 8
    load_kwargs: dict = field(default_factory=dict)
    custom_converter: Callable[..., dict | None] | None = None


def default_data_dir(config: VLMDatasetConfig | None, fallback: str, home: Path | None = None,
                     decimals: int = 0) -> Path:
    """``$HOME/datasets/<name with / -> _>/<config or default>/train=T%-val=V%-test=S%`` for a dataset (two decimals
    for CPT), else ``$HOME/datasets/<fallback>`` (``visual_instruct`` / ``visual_cpt``)."""
    root = (home or home_dir()) / "datasets"
    if config is None:
        return root / fallback
    t, v, s = split_percentages(config, decimals)  # type: ignore[arg-type]
    fmt = (lambda x: f"{int(x)}") if decimals == 0 else (lambda x: f"{x:.{decimals}f}")
    return root / config.dataset_name.replace("/", "_") / (config.dataset_config or "default") / \
        f"train={fmt(t)}%-val={fmt(v)}%-test={fmt(s)}%"


# --------------------------------------------------------------------------------------------------------------
# conversations and image sources


def normalize_conversations(conversations: Any) -> list[dict[str, str]]:
    """Turns as ``[{"from": "human"|"gpt"|<other>, "value": str}]``; :class:`SampleError` when malformed."""
    if not isinstance(conversations, list) or not conversations:
        raise SampleError("'conversations' must be a non-empty list of turns")
    turns = []
    for turn in conversations:
        if not isinstance(turn, dict):
            raise SampleError(f"a turn must be an object, got {type(turn).__name__}")
        role = next((turn[k] for k in ("from", "role", "speaker") if turn.get(k) is not None), None)
        value = next((turn[k] for k in ("value", "text", "content") if turn.get(k) is not None), None)
        if role is None or value is None:
            raise SampleError(f"a turn needs from/role/speaker and value/text/content: {json.dumps(turn)[:120]}")
        role = str(role).lower()
        role = "human" if role in HUMAN_ROLES else "gpt" if role in GPT_ROLES else role
        if not isinstance(value, str):
            raise SampleError(f"a turn's text must be a string, got {type(value).__name__}")
        turns.append({"from": role, "value": value})
    return turns


def image_sources(value: Any) -> list[str]:
    """The image field of a row as a list of sources (None / "" -> [])."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise SampleError(f"'image' must be a path, URL, data URI or a list of them, got {type(value).__name__}")


def is_remote(source: str) -> bool:
    """An ``http(s)://`` URL or a ``data:`` URI (not a local file)."""
    return bool(URL_RE.match(source)) or source.startswith("data:")


def resolve_local(source: str, base_dir: Path) -> Path:
    """A local image path; relative ones are taken from ``base_dir``."""
    path = Path(source).expanduser()
    return path if path.is_absolute() else base_dir / path


def load_image(source: str, base_dir: Path) -> Any:
    """A PIL image (RGB) from a local path, a URL or a data URI; :class:`SampleError` when that fails."""
    from PIL import Image

    try:
        if URL_RE.match(source):
            with urllib.request.urlopen(source, timeout=DOWNLOAD_TIMEOUT) as response:
                image = Image.open(io.BytesIO(response.read()))
        elif source.startswith("data:"):
            image = Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))
        else:
            image = Image.open(resolve_local(source, base_dir))
        image.load()
        return image.convert("RGB")
    except Exception as exc:
        raise SampleError(f"cannot read image {source[:200]} ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# conversion of one dataset row


def _save_image(image: Any, dataset_root: Path, config: VLMDatasetConfig, index: int, part: int = 0) -> str:
    name = f"image_{index:08d}.jpg" if part == 0 else f"image_{index:08d}_{part}.jpg"
    rel = Path(config.image_output_dir) / name
    (dataset_root / rel.parent).mkdir(parents=True, exist_ok=True)
    image.convert("RGB").save(dataset_root / rel, format="JPEG", quality=95)
    return rel.as_posix()


def process_image(value: Any, config: VLMDatasetConfig, dataset_root: Path, index: int,
                  source_dir: Path | None = None, part: int = 0) -> str | None:
    """One image of a row as the source to store: PIL images and bytes are saved under ``images/``, URLs are
    downloaded there (``--hf_download_images``); local paths are kept (made absolute against ``source_dir`` for a
    local dataset, which must then contain the file). None when there is no image or its download failed."""
    from PIL import Image

    if value is None:
        return None
    if isinstance(value, dict) and (value.get("bytes") or value.get("path")):  # datasets Image(decode=False)
        value = Image.open(io.BytesIO(value["bytes"])) if value.get("bytes") else value["path"]
    if isinstance(value, Image.Image):
        return _save_image(value, dataset_root, config, index, part)
    if not isinstance(value, str) or not value:
        return None
    if is_remote(value):
        if not config.download_images:
            return value
        try:
            return _save_image(load_image(value, dataset_root), dataset_root, config, index, part)
        except SampleError as exc:
            log(f"warning: row {index}: {exc}; row skipped")
            return None
    if source_dir is not None:
        path = resolve_local(value, source_dir)
        if not path.is_file():
            raise ScriptError(f"--hf_dataset_name={config.dataset_name}: row {index}: image file {path} not found")
        return str(path.resolve())
    return value


def process_images(value: Any, config: VLMDatasetConfig, dataset_root: Path, index: int,
                   source_dir: Path | None = None) -> str | list[str] | None:
    """The image field of a row (one image or a list): a source or a list of sources; None when any is missing."""
    if isinstance(value, (list, tuple)):
        if not value:
            return None
        out = [process_image(v, config, dataset_root, index, source_dir, part) for part, v in enumerate(value)]
        return None if any(o is None for o in out) else (out[0] if len(out) == 1 else out)  # type: ignore[return-value]
    return process_image(value, config, dataset_root, index, source_dir)


def convert_vlm_sample(row: dict[str, Any], config: VLMDatasetConfig, dataset_root: Path, index: int,
                       source_dir: Path | None = None) -> dict[str, Any] | None:
    """``{"image", "conversations"}`` for one row; None for a row to drop (no image, malformed turns)."""
    if config.custom_converter is not None:
        return config.custom_converter(row, config, dataset_root, index)
    conversations = row.get(config.conversations_field)
    if isinstance(conversations, str):
        try:
            conversations = json.loads(conversations)
        except ValueError:
            return None
    try:
        turns = normalize_conversations(conversations)
    except SampleError:
        return None
    if any(not t["value"].strip() for t in turns):
        return None
    image = process_images(row.get(config.image_field), config, dataset_root, index, source_dir)
    if image is None:
        return None
    return {"image": image, "conversations": turns}


def llava_instruct_converter(row: dict[str, Any], config: VLMDatasetConfig, dataset_root: Path, index: int,
                             source_dir: Path | None = None) -> dict[str, Any] | None:
    """LLaVA-style rows (``image`` + ``conversations`` with from/value), e.g. ``lmms-lab/LLaVA-NeXT-Data``."""
    image = process_images(row.get("image"), config, dataset_root, index, source_dir)
    if image is None:
        return None
    try:
        return {"image": image, "conversations": normalize_conversations(row.get("conversations"))}
    except SampleError:
        return None


def vqav2_converter(row: dict[str, Any], config: VLMDatasetConfig, dataset_root: Path, index: int,
                    source_dir: Path | None = None) -> dict[str, Any] | None:
    """VQA rows (``image``, ``question``, ``answer`` or ``answers``), e.g. ``HuggingFaceM4/VQAv2``."""
    image = process_image(row.get("image"), config, dataset_root, index, source_dir)
    if image is None:
        return None
    answer = row.get("answer")
    if answer is None:
        answers = row.get("answers") or [""]
        answer = answers[0].get("answer", "") if isinstance(answers[0], dict) else answers[0]
    question = str(row.get("question", ""))
    if not question.strip() or not str(answer).strip():
        return None
    return {"image": image, "conversations": [{"from": "human", "value": f"<image>\n{question}"},
                                              {"from": "gpt", "value": str(answer)}]}


CONVERTER_REGISTRY: dict[str, Callable[..., dict | None]] = {
    "lmms-lab/LLaVA-NeXT-Data": llava_instruct_converter,
    "HuggingFaceM4/VQAv2": vqav2_converter,
}


def get_converter_for_dataset(dataset_name: str) -> Callable[..., dict | None] | None:
    """The built-in converter for a known hub dataset, else None."""
    return CONVERTER_REGISTRY.get(dataset_name)


# --------------------------------------------------------------------------------------------------------------
# preparation


def _load_rows(config: VLMDatasetConfig) -> tuple[Any, Path | None]:
    """(the rows of ``config.split``, the local source directory or None)."""
    try:
        import datasets
    except ImportError as exc:
        raise ScriptError("preparing a dataset needs the 'datasets' package (or pass a ready --data_dir)") from exc
    name = config.dataset_name
    local = Path(name).expanduser()
    flag = f"--hf_dataset_name={name}"
    kwargs = dict(config.load_kwargs)
    if local.exists() and not local.is_dir():
        raise ScriptError(f"{flag}: a file is not a dataset; put it in a directory and pass the directory")
    try:
        if local.is_dir():
            files = sorted(p for p in local.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES
                           and not p.name.startswith("."))
            metadata = [p for p in files if p.stem == "metadata"]
            if metadata:
                loaded = datasets.load_dataset("imagefolder", data_dir=str(local), **kwargs)
            else:
                if not files:
                    raise ScriptError(f"{flag}: the directory holds no .jsonl/.json/.csv/.parquet file")
                if all(p.stat().st_size == 0 for p in files):
                    raise ScriptError(f"{flag}: the dataset is empty (all its files are empty)")
                builders = {DATA_SUFFIXES[p.suffix] for p in files}
                if len(builders) > 1:
                    raise ScriptError(f"{flag}: mixed data file types {sorted(builders)}; keep one kind")
                loaded = datasets.load_dataset(builders.pop(), data_files={"train": [str(p) for p in files]},
                                               **kwargs)
        else:
            if config.num_proc and config.num_proc > 1:
                kwargs.setdefault("num_proc", config.num_proc)
            loaded = datasets.load_dataset(name, config.dataset_config, **kwargs)
    except ScriptError:
        raise
    except Exception as exc:
        raise ScriptError(f"{flag}: cannot load it ({short_error(exc)})") from exc
    if isinstance(loaded, datasets.DatasetDict):
        if config.split not in loaded:
            raise ScriptError(f"--hf_split={config.split}: the dataset {name} has splits {sorted(loaded)}")
        loaded = loaded[config.split]
    return loaded, (local.resolve() if local.is_dir() else None)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _build(config: VLMDatasetConfig, data_dir: Path) -> None:
    if not 0 < config.train_split_ratio < 1:
        raise ScriptError(f"--hf_train_split_ratio={config.train_split_ratio}: must be between 0 and 1 (exclusive)")
    log(f"preparing dataset {config.dataset_name} ({config.dataset_config or 'default'}, split {config.split}) "
        f"into {data_dir}")
    rows, source_dir = _load_rows(config)
    n = len(rows)
    if config.max_samples is not None and n > config.max_samples:
        log(f"using the first {config.max_samples} of {n} rows (--hf_max_samples)")
        n = config.max_samples
    if n == 0:
        raise ScriptError(f"--hf_dataset_name={config.dataset_name}: split '{config.split}' has no rows")
    parts = split_indices(n, config.train_split_ratio, config.val_test_split_ratio)
    builtin = get_converter_for_dataset(config.dataset_name)

    def convert(row: dict[str, Any], index: int) -> dict[str, Any] | None:
        if config.custom_converter is not None:
            return config.custom_converter(row, config, tmp, index)
        if builtin is not None:
            return builtin(row, config, tmp, index, source_dir)
        return convert_vlm_sample(row, config, tmp, index, source_dir)

    with staged_data_dir(data_dir) as tmp:
        counts = {}
        for split, fname in SPLIT_FILES.items():
            converted, skipped = [], 0
            for index in sorted(parts[split]):
                out = convert(rows[index], index)
                if out is None:
                    skipped += 1
                else:
                    converted.append(out)
            _write_jsonl(tmp / fname, converted)
            counts[split] = (len(converted), skipped)
        if counts["train"][0] == 0:
            raise ScriptError(f"--hf_dataset_name={config.dataset_name}: no usable training row (rows need an "
                              f"image in '{config.image_field}' and turns in '{config.conversations_field}')")
    log(f"dataset ready in {data_dir}: " + ", ".join(f"{k} {c}" + (f" ({s} skipped)" if s else "")
                                                     for k, (c, s) in counts.items()))


def prepare_vlm_datasets(config: VLMDatasetConfig, dataset_root: Path | str, rank: int | None = None,
                         poll_seconds: float = 30.0) -> Path:
    """Make sure ``dataset_root`` holds the three JSONL files and ``.data_ready``; returns it
    (``prepare_on_rank_zero``: global rank 0 prepares unless the marker exists, the other ranks poll for it)."""
    return prepare_on_rank_zero(dataset_root, lambda data_dir: _build(config, data_dir), rank, poll_seconds)


# --------------------------------------------------------------------------------------------------------------
# reading prepared files


def read_vlm_jsonl(path: Path, limit: int | None = None, require_images: bool = False) -> list[dict[str, Any]]:
    """Validated rows of a VLM JSONL file: ``{"images": [source, ...], "conversations": [...], "line": N}``.

    Local image files must exist. Any problem is a :class:`ScriptError` naming ``path:line``.
    """
    rows: list[dict[str, Any]] = []
    base_dir = path.parent
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ScriptError(f"{where}: not a JSON line ({exc})") from None
            if not isinstance(row, dict):
                raise ScriptError(f"{where}: a line must be a JSON object")
            try:
                turns = normalize_conversations(row.get("conversations"))
                sources = image_sources(row.get("image", row.get("images")))
            except SampleError as exc:
                raise ScriptError(f"{where}: {exc}") from None
            tags = sum(t["value"].count("<image>") for t in turns)
            if tags > len(sources):
                raise ScriptError(f"{where}: {tags} <image> tag(s) but {len(sources)} image(s)")
            if require_images and not sources:
                raise ScriptError(f"{where}: no image")
            for source in sources:
                if not is_remote(source):
                    image_path = resolve_local(source, base_dir)
                    if not image_path.is_file():
                        raise ScriptError(f"{where}: image file {image_path} not found")
            rows.append({"images": sources, "conversations": turns, "line": number})
    return rows
