"""The command lines the console entry reads without Typer (:mod:`mlrecipe.cli.plain_lines`) mean what Typer reads
them to mean: the table is each command's options as Typer builds them, the functions take the commands' parameters
with their defaults, thousands of generated lines parse to Typer's values or are left to Typer, and what a plain
line prints is what the Typer app prints for it."""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import pytest
import typer.main
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner

from mlrecipe.cli import entry, read_verbs
from mlrecipe.cli.app import app, app_for
from mlrecipe.cli.plain_lines import FLAG, INT, VALUE, VALUES, VERBS, parse
from tests.repo import EXAMPLES

QUICKSTART = str(EXAMPLES / "quickstart" / "pipeline.yaml")
#: Words the generated lines are made of, besides each verb's option spellings.
WORDS = ["json", "text", "x", "", "-", "--", "-x", "--help", "-h", "3", "-1", " 4", "1_0", "+2", "a=b", "k=v,w=z",
         "ünï", "local://default/r", "=", "--output=json", "-ojson", "-fo", "--rank=", "--follow=1", QUICKSTART]
RUNS_PER_VERB = 1500


def click_command(verb: str) -> typer.core.TyperCommand:
    """The Click command Typer builds for ``verb``."""
    return typer.main.get_command(app_for([verb])).commands[verb]  # type: ignore[attr-defined]


def kind(param: TyperOption) -> str:
    if param.is_flag:
        return FLAG
    if param.multiple:
        return VALUES
    return INT if param.type.name == "int" else VALUE


def normal(values: dict[str, object]) -> dict[str, object]:
    """Typer's and the plain parse's values alike: paths as text, sequences as lists, an empty one as None."""
    out: dict[str, object] = {}
    for name, value in values.items():
        if isinstance(value, (tuple, list)):
            value = list(value) or None
        out[name] = str(value) if isinstance(value, Path) else value
    return out


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_the_table_is_typers_command_line(verb: str) -> None:
    function, positional, options = VERBS[verb]
    command = click_command(verb)
    arguments = [p for p in command.params if isinstance(p, TyperArgument)]
    assert tuple((p.name, p.required) for p in arguments) == positional
    declared = {spelling: (p.name, kind(p)) for p in command.params if isinstance(p, TyperOption)
                for spelling in p.opts + p.secondary_opts if spelling != "--help"}
    assert declared == options
    signature = inspect.signature(getattr(read_verbs, function))
    assert list(signature.parameters) == [p.name for p in command.params if p.name != "help"]
    for param in command.params:
        if param.name != "help" and not param.required:
            assert signature.parameters[param.name].default == (None if param.multiple else param.default), param.name


def generated_lines(verb: str, rng: random.Random) -> list[list[str]]:
    spellings = list(VERBS[verb][2])
    vocabulary = spellings + [f"{s}=" + rng.choice(WORDS) for s in spellings if s.startswith("--")] + WORDS
    plain_words = ["json", "text", "x", "3", "a=b", "r", QUICKSTART]
    lines = []
    for _ in range(RUNS_PER_VERB):
        line: list[str] = []
        for _ in range(rng.randint(0, 6)):
            if rng.random() < 0.5:  # an option with a plain value: lines the plain parse takes
                spelling = rng.choice(spellings)
                line += [spelling] + ([] if VERBS[verb][2][spelling][1] == FLAG else [rng.choice(plain_words)])
            else:
                line.append(rng.choice(vocabulary))
        lines.append(line)
    return lines


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_line_the_plain_parse_takes_means_what_typer_reads(verb: str) -> None:
    function, _, _ = VERBS[verb]
    command = click_command(verb)
    defaults = {name: p.default for name, p in inspect.signature(getattr(read_verbs, function)).parameters.items()
                if p.default is not inspect.Parameter.empty}
    taken = left = 0
    for line in generated_lines(verb, random.Random(f"plain-{verb}")):
        plain = parse([verb, *line])
        try:
            typer_values = command.make_context(verb, list(line)).params
        except Exception:  # Typer's vendored Click's UsageError (and Exit): Typer refuses the line
            typer_values = None
        if plain is None:
            left += 1
            continue
        taken += 1
        assert typer_values is not None, f"plain parse took a line Typer refuses: {line}"
        assert plain[0] == function
        assert normal({**defaults, **plain[1]}) == normal(typer_values), line
    assert taken > RUNS_PER_VERB // 10 and left > RUNS_PER_VERB // 10  # both ways were exercised


@pytest.mark.parametrize("line", [
    ["--help"], ["status", "--help"], ["list", "-x"], ["logs"], ["status", "a", "b"], ["status", "-o"],
    ["status", "-o", "--help"], ["logs", "r", "--rank", "x"], ["validate", "f", "--", "g"], ["install", "a", "b"],
    ["list", "-ojson"], ["logs", "r", "--follow=1"], [],
], ids=" ".join)
def test_lines_typer_must_read_are_left_to_it(line: list[str]) -> None:
    assert parse(line) is None


@pytest.mark.parametrize("line", [
    ["list"], ["list", "-o", "json"], ["status"], ["status", "--output=json"], ["status", "nosuch"],
    ["logs", "nosuch"], ["validate", QUICKSTART], ["validate", QUICKSTART, "-o", "json"],
    ["validate", "no/such/file.yaml"], ["validate", QUICKSTART, "-b", "nosuch"],
], ids=" ".join)
def test_a_plain_line_prints_what_the_typer_app_prints(line: list[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLRECIPE_HOME", str(tmp_path / "mlhome"))
    typer_result = CliRunner().invoke(app, line)
    plain = parse(line)
    assert plain is not None
    code = entry.run_guarded(*plain)
    printed = capfd.readouterr()
    assert (code, printed.out + printed.err) == (typer_result.exit_code, typer_result.output)
