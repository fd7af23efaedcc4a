"""The plain command lines of the verbs people run in loops, read without Typer.

Importing Typer costs more than everything else ``mlrecipe status`` or ``mlrecipe list`` does (about 200 million
instructions of their 225), and ``validate``'s libraries (pydantic, PyYAML) cost as much again. So the console entry
(:mod:`mlrecipe.cli.entry`) first offers the command line to :func:`parse`, which reads only the plainest lines of
``status``, ``list``, ``logs`` and ``validate``: each option spelled out as Typer declares it (``--output json``,
``--output=json``, ``-o json``), positional arguments anywhere, nothing else. Anything else, ``--help``, a usage
error, an option value that starts with ``-``, ``--``, short options run together, any other verb, is left to Typer,
which prints its help and its messages as ever.

What :func:`parse` accepts, Typer parses to the same values: ``tests/unit/test_cli_plain_lines.py`` checks that
:data:`VERBS` is each command's options as Typer builds them (names, kinds, defaults), and that for thousands of
generated command lines :func:`parse` either leaves the line to Typer or gives exactly Typer's parameters.
"""

from __future__ import annotations

VALUE, VALUES, FLAG, INT = "value", "values", "flag", "int"  #: what an option takes

_OUTPUT = {"--output": ("out", VALUE), "-o": ("out", VALUE)}
_NAMESPACE = {"--namespace": ("namespace", VALUE), "-n": ("namespace", VALUE)}
_BACKEND = {"--backend": ("backend", VALUE), "-b": ("backend", VALUE)}
_BACKEND_OPTS = {"--backend-opt": ("backend_opt", VALUES), "-B": ("backend_opt", VALUES),
                 "--kubeconfig": ("kubeconfig", VALUE), "--kube-context": ("kube_context", VALUE)}

#: verb: (the :mod:`mlrecipe.cli.read_verbs` function, its positional parameters as (name, required), its options
#: as {spelling: (parameter, kind)}).
VERBS: dict[str, tuple[str, tuple[tuple[str, bool], ...], dict[str, tuple[str, str]]]] = {
    "list": ("list_", (), _OUTPUT),
    "status": ("status", (("release", False),), {**_NAMESPACE, **_BACKEND, **_OUTPUT, **_BACKEND_OPTS}),
    "logs": ("logs", (("release", True), ("step", False)),
             {"--follow": ("follow", FLAG), "-f": ("follow", FLAG), "--rank": ("rank", INT), **_NAMESPACE,
              **_BACKEND, **_BACKEND_OPTS}),
    "validate": ("validate", (("file", True),),
                 {"--chart": ("chart", VALUE), "-c": ("chart", VALUE), **_OUTPUT, **_BACKEND, **_BACKEND_OPTS}),
}


def parse(args: list[str]) -> tuple[str, dict[str, object]] | None:
    """``(function name, keyword arguments)`` for a plain command line of one of :data:`VERBS` (``args`` without
    the program's name); None for any other line, which Typer then reads."""
    if not args or args[0] not in VERBS:
        return None
    function, positional, options = VERBS[args[0]]
    given: dict[str, object] = {}
    words: list[str] = []
    rest = iter(args[1:])
    for token in rest:
        if token[:1] != "-" or token == "-":
            words.append(token)
            continue
        name, attached, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if name not in options:
            return None
        parameter, kind = options[name]
        if kind == FLAG:
            if attached:
                return None
            given[parameter] = True
            continue
        if not attached:
            value = next(rest, "-")
            if value[:1] == "-":
                return None
        if kind == VALUES:
            given.setdefault(parameter, [])
            given[parameter].append(value)  # type: ignore[attr-defined]
        elif kind == INT:
            try:
                given[parameter] = int(value)
            except ValueError:
                return None
        else:
            given[parameter] = value
    if len(words) > len(positional) or any(required for _, required in positional[len(words):]):
        return None
    given.update((name, word) for (name, _), word in zip(positional, words, strict=False))
    return function, given
