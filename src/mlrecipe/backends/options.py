"""Backend options from the config file's section and from the command line (``--backend-opt key=value``).

The command line wins over the file. Every problem names where it came from: the config file with its
line and field, or the command-line option.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from mlrecipe.backends.base import BackendOptions
from mlrecipe.config import read_config
from mlrecipe.errors import SpecError, SpecIssue
from mlrecipe.spec.errors import format_path
from mlrecipe.spec.issues import ValueSources, pydantic_issues
from mlrecipe.spec.values import deep_merge, parse_sets

OptionsT = TypeVar("OptionsT", bound=BackendOptions)
CLI_SOURCE = "--backend-opt"


def parse_backend_opts(expressions: list[str] | None) -> dict[str, Any]:
    """``key=value[,key2=value2]`` expressions (Helm ``--set`` syntax, dotted keys for maps) as a mapping."""
    try:
        return parse_sets(list(expressions or []))
    except SpecError as exc:
        raise SpecError([SpecIssue(CLI_SOURCE, None, i.path, i.message) for i in exc.issues]) from None


def load_options(model: type[OptionsT], section: str, overrides: dict[str, Any] | None = None) -> OptionsT:
    """The options of one backend: the config file's ``section``, overridden by ``overrides``."""
    doc = read_config()
    data: dict[str, Any] = {}
    sources = ValueSources()
    if doc is not None:
        if doc.data is not None and not isinstance(doc.data, dict):
            raise SpecError.single(doc.file, "the config file must be a mapping of backend sections", 1)
        raw = (doc.data or {}).get(section)
        if raw is not None and not isinstance(raw, dict):
            raise SpecError.single(doc.file, f"must be a mapping of {section} options", doc.line_of((section,)),
                                   section)
        data = dict(raw or {})
        sources.entries.append((doc, (section,), section))
    try:
        file_options = model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_issues(exc, data, sources)) from None
    if not overrides:
        return file_options
    merged = deep_merge(file_options.model_dump(exclude_unset=True), overrides)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        issues = [SpecIssue(CLI_SOURCE, None, format_path(tuple(e["loc"])), _message(e)) for e in exc.errors()]
        raise SpecError(issues) from None


def _message(err: ErrorDetails) -> str:
    if err["type"] == "extra_forbidden":
        return f"unknown option '{err['loc'][-1]}' (see 'mlrecipe options BACKEND')"
    return str(err["msg"])
