"""The tokenizer a preparation uses: a Hugging Face tokenizer folder or GPT-2 BPE files, read offline.

``tokenizer.json`` is read with ``tokenizers``; a folder without one (a slow or SentencePiece tokenizer) through
transformers' ``AutoTokenizer`` with ``local_files_only``. ``vocab.json`` + ``merges.txt`` (``--vocab-file`` /
``--merge-file``, or such a folder) make a byte-level GPT-2 BPE tokenizer.

A special token written literally in a document's text (``<|endoftext|>``) follows the upstream tool of each kind:
a Hugging Face tokenizer (``tokenizer.json``, as ``preprocess_data.py --tokenizer-type HuggingFaceTokenizer``) encodes
it as that special token, so it ends a document inside the text; GPT-2 BPE files (as ``GPT2BPETokenizer``) have no
special tokens and encode it as ordinary text. Only ``--append-eod`` adds the end-of-document token between documents.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlrecipe_scripts.megatron.data.fetch import sha256_file

EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eos|>")


class TokenizerError(Exception):
    """A tokenizer that cannot be read or has no end-of-document token when one is needed."""


@dataclass(frozen=True)
class TokenizerSource:
    """Where the tokenizer comes from (picklable, so worker processes load their own copy)."""

    kind: str  # "huggingface" or "gpt2-bpe"
    files: tuple[Path, ...]
    directory: Path | None = None
    eod_token: str | None = None

    @classmethod
    def from_args(cls, tokenizer_dir: str | None, vocab_file: str | None, merge_file: str | None,
                  eod_token: str | None) -> TokenizerSource:
        """From the script's flags (exactly one of a folder or a vocab + merge pair)."""
        if tokenizer_dir:
            folder = Path(tokenizer_dir)
            if not folder.is_dir():
                raise TokenizerError(f"{folder}: not a directory")
            files = tuple(sorted(p for p in folder.iterdir() if p.is_file()))
            if not files:
                raise TokenizerError(f"{folder}: no tokenizer files")
            names = {p.name for p in files}
            kind = "gpt2-bpe" if "tokenizer.json" not in names and {"vocab.json", "merges.txt"} <= names \
                else "huggingface"
            return cls(kind, files, folder, eod_token)
        if not (vocab_file and merge_file):
            raise TokenizerError("give --tokenizer-dir, or --vocab-file with --merge-file")
        files = (Path(vocab_file), Path(merge_file))
        for path in files:
            if not path.is_file():
                raise TokenizerError(f"{path}: no such file")
        return cls("gpt2-bpe", files, None, eod_token)

    def hashes(self) -> dict[str, str]:
        """{file name: sha256} of the tokenizer's files."""
        return {path.name: sha256_file(path) for path in self.files}

    def fingerprint(self) -> str:
        """One sha256 over the files' hashes and the end-of-document token (outputs depend on both)."""
        text = json.dumps({"files": self.hashes(), "eod": self.eod_token, "kind": self.kind}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def copy_to(self, folder: Path) -> list[dict[str, Any]]:
        """Copy the files into ``folder`` (the shared data dir's ``tokenizer/``); their names, sizes and sha256.

        GPT-2 BPE files are stored as ``vocab.json`` and ``merges.txt`` whatever their names were."""
        names = (("vocab.json", "merges.txt") if self.kind == "gpt2-bpe" and self.directory is None
                 else tuple(p.name for p in self.files))
        folder.mkdir(parents=True, exist_ok=True)
        listed = []
        for source, name in zip(self.files, names, strict=True):
            target = folder / name
            if source.resolve() != target.resolve():
                shutil.copyfile(source, target)
            listed.append({"name": name, "bytes": target.stat().st_size, "sha256": sha256_file(target)})
        return listed


class Tokenizer(Protocol):
    """What preparation needs from a tokenizer."""

    vocab_size: int
    eod_id: int | None

    def encode(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> str: ...


class FastTokenizer:
    """A ``tokenizers.Tokenizer`` (no special tokens added: the end-of-document token is appended explicitly)."""

    def __init__(self, tok: Any, eod_token: str | None) -> None:
        self._tok = tok
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=True)
        self.eod_id: int | None = _eod_id(tok.get_vocab(with_added_tokens=True), eod_token)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))


class TransformersTokenizer:
    """A transformers tokenizer read from a local folder (slow or SentencePiece tokenizers)."""

    def __init__(self, tok: Any, eod_token: str | None) -> None:
        self._tok = tok
        self.vocab_size: int = len(tok)
        self.eod_id: int | None = _eod_id(tok.get_vocab(), eod_token or tok.eos_token)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [list(self._tok.encode(t, add_special_tokens=False)) for t in texts]

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


def _config_eos(folder: Path | None) -> str | None:
    config = folder / "tokenizer_config.json" if folder else None
    if config is None or not config.is_file():
        return None
    value = json.loads(config.read_text()).get("eos_token")
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _eod_id(vocab: dict[str, int], wanted: str | None) -> int | None:
    if wanted is not None:
        if wanted not in vocab:
            raise TokenizerError(f"end-of-document token {wanted!r} is not in the vocabulary")
        return vocab[wanted]
    return next((vocab[t] for t in EOD_CANDIDATES if t in vocab), None)


def load(source: TokenizerSource) -> Tokenizer:
    """Read the tokenizer offline; TokenizerError naming the file that could not be read."""
    eod = source.eod_token or _config_eos(source.directory)
    try:
        import tokenizers
        from tokenizers import decoders, models, pre_tokenizers
    except ImportError as exc:
        raise TokenizerError(f"the tokenizers package is missing ({exc})") from None
    if source.kind == "gpt2-bpe":
        vocab, merges = source.files if source.directory is None else (
            source.directory / "vocab.json", source.directory / "merges.txt")
        try:
            tok = tokenizers.Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
        except Exception as exc:
            raise TokenizerError(f"{vocab} / {merges}: cannot read GPT-2 BPE files ({_one_line(exc)})") from None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return FastTokenizer(tok, eod)
    assert source.directory is not None
    path = source.directory / "tokenizer.json"
    if path.is_file():
        try:
            return FastTokenizer(tokenizers.Tokenizer.from_file(str(path)), eod)
        except TokenizerError:
            raise
        except Exception as exc:
            raise TokenizerError(f"{path}: cannot read the tokenizer ({_one_line(exc)})") from None
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(source.directory), local_files_only=True)
    except Exception as exc:
        raise TokenizerError(f"{source.directory}: cannot read the tokenizer ({_one_line(exc)})") from None
    return TransformersTokenizer(hf, eod)


PROBE_TEXT = "The quick brown fox jumps over the lazy dog."


def check_tokenizer(tok: Tokenizer) -> None:
    """Refuse a tokenizer that would write empty documents: no vocabulary, or no token for plain English text."""
    if tok.vocab_size < 1:
        raise TokenizerError("the tokenizer has an empty vocabulary")
    if not tok.encode([PROBE_TEXT])[0]:
        raise TokenizerError(f"the tokenizer turns text into no tokens at all ({PROBE_TEXT!r} gave none)")


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
