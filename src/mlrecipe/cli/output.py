"""Printing of errors and results for people (text) and scripts (json); errors go through
:func:`mlrecipe.credentials.redact_text`, so a credential in a bad ``--set`` or option is not echoed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from mlrecipe.errors import ExitCode, MlrecipeError, SpecError


def redact_text(text: str) -> str:
    """:func:`mlrecipe.credentials.redact_text`, loaded only when an error is printed."""
    from mlrecipe.credentials import redact_text as redact

    return redact(text)


def print_spec_error(exc: SpecError) -> None:
    """One line per problem on stderr, ``file:line: field: message``."""
    count = len(exc.issues)
    for issue in exc.issues:
        print(redact_text(f"error: {issue}"), file=sys.stderr)
    if count > 1:
        print(f"{count} errors; nothing was started", file=sys.stderr)
    else:
        print("nothing was started", file=sys.stderr)


def print_error(exc: MlrecipeError) -> ExitCode:
    """Print any of mlrecipe's errors for a person; return its exit code."""
    if isinstance(exc, SpecError):
        print_spec_error(exc)
    else:
        print(redact_text(f"error: {exc}"), file=sys.stderr)
    return exc.exit_code


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> ExitCode:
    """Print ``message`` as one error line (passwords in URLs and well-known tokens masked); return ``code``."""
    print(redact_text(f"error: {message}"), file=sys.stderr)
    return code


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def guarded(command: Callable[[], int | None]) -> int:
    """Run ``command`` (the Typer app, or a verb of a plain line) as every command runs: mlrecipe's errors as one
    line and their exit code, Ctrl-C as ``INTERRUPTED``, a reader that went away (``| head``) without a traceback;
    the process's end through :func:`mlrecipe.cli.lifecycle.end`."""
    from mlrecipe.cli import lifecycle

    try:
        return int(command() or 0)
    except MlrecipeError as exc:
        return print_error(exc)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's advice: no error at exit
        return 1
    finally:
        lifecycle.end()
