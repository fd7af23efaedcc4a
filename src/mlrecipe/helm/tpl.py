"""Evaluate Helm template expressions in plain strings with the real Helm engine.

Reference recipes put expressions such as ``{{ .Release.Name }}`` or
``{{ mul .Values.resources.num_nodes .Values.resources.procs_per_node }}`` in values; the charts
apply ``tpl`` to them. The local and Slurm backends evaluate them the same way through a tiny
chart (built in memory once per process, so nothing is left on disk) rendered by helm_python, so
every backend agrees with ``helm install``.

An expression is the user's code run by Go: ``{{ until 100000000 }}`` would take gigabytes. Expressions that
use only the functions of :data:`BOUNDED_WORDS` and small numbers are evaluated in this process; any other runs
in a child process with at most :data:`MEMORY_LIMIT` bytes of address space and :data:`TIME_LIMIT` seconds.
"""

from __future__ import annotations

import functools
import json
import math
import re
import resource  # at import: _limit_memory runs in the forked child, where importing is not safe
import sys
from typing import Any

from mlrecipe.errors import TemplateError

_KEY = "__mlrecipe_strings"
_TEMPLATE = (
    "{{- $out := list -}}\n"
    "{{- range $s := .Values." + _KEY + " }}{{ $out = append $out (tpl (toString $s) $) }}{{ end -}}\n"
    "{{- toJson $out -}}\n"
)
#: Wrapped so, a string is parsed by Go's template parser and never executed.
_PARSE_ONLY = "{{ if false }}%s\n{{ end }}"  # the newline: a value ending in "{" stays text

#: Seconds and bytes of address space (the Go runtime reserves about 1.8 GB of it at start) that the child
#: evaluating expressions outside :data:`BOUNDED_WORDS` may use.
TIME_LIMIT = 5.0
MEMORY_LIMIT = 2 * 2**30 + 2**28

#: Words whose evaluation is bounded by the size of the expression and of the values: no loops (``range``,
#: ``until``), no repetition, no generated keys, no nested templates (``tpl``, ``include``).
BOUNDED_WORDS = frozenset((
    "if", "else", "end", "with", "and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "nil", "true", "false",
    "default", "empty", "coalesce", "ternary", "required", "quote", "squote", "upper", "lower", "title", "trim",
    "trimAll", "trimPrefix", "trimSuffix", "replace", "nospace", "toString", "int", "int64", "float64", "atoi",
    "add", "add1", "sub", "mul", "div", "mod", "max", "min", "len", "index", "first", "last", "join", "split",
    "splitList", "contains", "hasPrefix", "hasSuffix", "print", "printf", "println", "base", "dir", "ext", "clean",
    "toJson", "toYaml", "b64enc", "b64dec", "sha256sum", "get", "hasKey", "keys", "dict", "list", "trunc", "substr",
    "kebabcase", "snakecase", "camelcase"
))
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`')
_ACTION = re.compile(r"{{-?(.*?)-?}}", re.S)
_WORD = re.compile(r"(?<![.$\w])[A-Za-z_]\w*")
_BIG_NUMBER = re.compile(r"\d{7,}")


@functools.lru_cache(maxsize=1)
def _chart() -> Any:
    """The tiny chart, from an archive built in memory (no temporary directory to clean up)."""
    import io
    import tarfile

    import helm_python

    from mlrecipe.helm._engine import LOCK

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, text in (("Chart.yaml", "apiVersion: v2\nname: mlrecipe-tpl\nversion: 0.1.0\n"),
                           ("templates/strings.json", _TEMPLATE)):
            body = text.encode()
            info = tarfile.TarInfo(f"mlrecipe-tpl/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    with LOCK:
        return helm_python.Chart.load_archive(data.getvalue())


def _json_safe(value: Any) -> Any:
    """``value`` as JSON can carry it: ``.inf`` and ``.nan`` become their YAML text (Go's JSON has no such
    number), so that one such value elsewhere does not break every expression."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _detail(exc: Exception) -> str:
    """Helm's message without the tiny chart's own file and template: what the user's expression did."""
    text = str(getattr(exc, "detail", None) or exc)
    at = text.rfind("gotpl:")
    if at >= 0:
        text = "line " + text[at + len("gotpl:"):]
    elif "error calling tpl: " in text:
        text = text.split("error calling tpl: ", 1)[1]
    return text.strip()


def _render(strings: list[str], values: dict[str, Any], release: str, namespace: str) -> list[str]:
    """Evaluate in this process; raises helm_python's ``HelmError``."""
    from mlrecipe.helm._engine import LOCK  # the engine's modules only where Helm runs (not for plain fields)

    with LOCK:
        rendered = _chart().render({**values, _KEY: strings}, name=release, namespace=namespace)
    return list(json.loads(next(iter(rendered.values()), "[]")))


def is_bounded(expression: str) -> bool:
    """True when ``expression`` uses only :data:`BOUNDED_WORDS` and numbers of at most 6 digits."""
    if _BIG_NUMBER.search(expression):
        return False
    return all(set(_WORD.findall(_STRING.sub('""', action))) <= BOUNDED_WORDS for action in _ACTION.findall(expression))


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _render_bounded(strings: list[str], values: dict[str, Any], release: str, namespace: str) -> list[str]:
    """Evaluate in a child process under :data:`MEMORY_LIMIT` and :data:`TIME_LIMIT`."""
    import subprocess

    payload = json.dumps({"strings": strings, "values": values, "release": release, "namespace": namespace})
    try:
        done = subprocess.run([sys.executable, "-m", "mlrecipe.helm.tpl"], input=payload, capture_output=True,
                              text=True, timeout=TIME_LIMIT, preexec_fn=_limit_memory, check=False)
    except subprocess.TimeoutExpired:
        raise TemplateError(f"Helm expression failed: took longer than {TIME_LIMIT:.0f} s") from None
    if done.returncode == 0:
        return list(json.loads(done.stdout))
    if done.returncode == 3:
        raise TemplateError(f"Helm expression failed: {done.stdout.strip()}")
    if "out of memory" in done.stderr or "cannot allocate memory" in done.stderr.lower() or done.returncode < 0:
        raise TemplateError("Helm expression failed: needs more memory than the bound of its evaluation")
    raise TemplateError(f"Helm expression failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")


def _in_process(strings: list[str], values: dict[str, Any], release: str, namespace: str) -> list[str]:
    from helm_python import HelmError

    try:
        return _render(strings, values, release, namespace)
    except HelmError as exc:
        raise TemplateError(f"Helm expression failed: {_detail(exc)}") from None


def expand_templates(strings: list[str], values: dict[str, Any], release: str, namespace: str) -> list[str]:
    """Return ``strings`` with Helm expressions evaluated (``tpl``) against ``values`` and the release.

    Strings without ``{{`` come back untouched, and a list without any never reaches Helm. Bounded expressions
    (:func:`is_bounded`) are evaluated together in this process, each other one alone in a bounded child.
    Raises :class:`TemplateError` when an expression fails, is malformed or exceeds the bounds; its ``index``
    is the position in ``strings`` of the one that failed.
    """
    strings = [str(s) for s in strings]
    out = list(strings)
    todo = [i for i, s in enumerate(strings) if "{{" in s]
    if not todo:
        return out
    safe = _json_safe(values)
    bounded = [i for i in todo if is_bounded(strings[i])]
    try:
        for i, text in zip(bounded, _in_process([strings[i] for i in bounded], safe, release, namespace), strict=True):
            out[i] = text
    except TemplateError:
        for i in bounded:  # which one: evaluated alone
            _evaluate_one(strings, i, lambda s: _in_process([s], safe, release, namespace))
        raise
    for i in todo:
        if i not in bounded:
            out[i] = _evaluate_one(strings, i, lambda s: _render_bounded([s], safe, release, namespace)[0])
    return out


def _evaluate_one(strings: list[str], index: int, evaluate: Any) -> str:
    try:
        return str(evaluate(strings[index]))
    except TemplateError as exc:
        exc.index = index
        raise


#: An action that only names a field (``{{ .Release.Name }}``, ``{{- .Values.a.b -}}``): Go's parser takes it as it
#: is, so a string of such actions needs no parse by Helm (whose library costs about 0.1 s to load).
_FIELD_ACTION = re.compile(r"\{\{(?:-\s+|\s*)(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?:\s+-|\s*)\}\}")


def _plain_fields_only(text: str) -> bool:
    """Whether every action in ``text`` is a field reference (:data:`_FIELD_ACTION`), each found as Go's lexer finds
    actions: from the first ``{{`` after the previous action."""
    start = text.find("{{")
    while start != -1:
        action = _FIELD_ACTION.match(text, start)
        if action is None:
            return False
        start = text.find("{{", action.end())
    return True


def syntax_errors(strings: list[str]) -> list[tuple[int, str]]:
    """``(index, problem)`` of each string whose Helm expressions Go's template parser refuses (an unclosed
    action, an unknown function); nothing is evaluated."""
    problems = [(i, "malformed Helm expression: '{{' without a closing '}}'") for i, s in enumerate(strings)
                if s.rfind("{{") > s.rfind("}}")]
    todo = [(i, s) for i, s in enumerate(strings)
            if "{{" in s and i not in dict(problems) and not _plain_fields_only(s)]
    if not todo:
        return problems
    from helm_python import HelmError

    try:
        _render([_PARSE_ONLY % s for _, s in todo], {}, "r", "n")
        return problems
    except HelmError:
        pass
    for index, s in todo:
        try:
            _render([_PARSE_ONLY % s], {}, "r", "n")
        except HelmError as exc:
            problems.append((index, f"malformed Helm expression: {_detail(exc)}"))
    return sorted(problems)


def _child() -> int:
    """Entry point of the bounded child: JSON request on stdin, JSON list (or exit 3 and the error) on stdout."""
    from helm_python import HelmError

    request = json.load(sys.stdin)
    try:
        out = _render(request["strings"], request["values"], request["release"], request["namespace"])
    except HelmError as exc:
        sys.stdout.write(_detail(exc))
        return 3
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_child())
