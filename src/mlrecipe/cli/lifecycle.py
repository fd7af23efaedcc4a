"""The CLI process's own start and exit, kept cheap: they sit between a user's command and the first training step.

Measured on the 2-core CPU machine (``benchmarks/bench_first_step.py``), an ``install`` spent, besides its imports:
some 90 garbage collections (about 14 ms) over the ~40,000 objects that its imports create and that live until it
exits; pydantic's look for plugins in every installed distribution's entry points (about 30 ms; mlrecipe uses
none); and, at exit, the interpreter's last collections over the same objects (about 40 ms).

- :func:`begin` (first thing in ``main``): collect young objects only every ``START_GC_THRESHOLD`` allocations
  while the command starts (still bounded for a command that never says it has started);
- :func:`skip_pydantic_plugins` (before a command builds mlrecipe's models);
- :func:`started` (before a command may run for long, e.g. the runner's loop): what the start built is frozen out
  of the collector's view (``gc.freeze``), which then resumes its usual pace;
- :func:`end` (last thing in ``main``): the same freeze, so the exit does not walk the heap once more; the
  interpreter still flushes and closes its streams and runs ``atexit`` handlers as usual (only garbage left in
  reference cycles is not finalized: the CLI closes its files itself, in ``with`` blocks).

Each is a no-op in a process whose start did not go through :func:`begin` (tests calling the Typer app, a library).
"""

from __future__ import annotations

import gc

START_GC_THRESHOLD = 100_000  #: allocations between two young-generation collections while the CLI starts

_usual_thresholds = gc.get_threshold()
_cli = False  #: this process is the CLI (main called begin)
_starting = False  #: between begin and started


def begin() -> None:
    """The CLI process starts: collect rarely until :func:`started` or :func:`end`."""
    global _cli, _starting
    _cli = _starting = True
    gen0, *older = _usual_thresholds
    gc.set_threshold(max(gen0, START_GC_THRESHOLD), *older)


def skip_pydantic_plugins() -> None:
    """Spare the CLI pydantic's scan of every installed distribution for plugins (mlrecipe uses none).

    Only in the CLI process, and not when ``PYDANTIC_DISABLE_PLUGINS`` says what to load: the steps it starts
    (their own Python) look for plugins as usual. Pydantic keeps the plugins it found in ``_loader._plugins``
    (``None``: not looked for yet); a pydantic without it is left alone.
    """
    import os

    if not _cli or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return
    from pydantic.plugin import _loader

    if getattr(_loader, "_plugins", {}) is None:
        _loader._plugins = {}


def started() -> None:
    """The command has imported what it needs and checked its inputs, and may now run for long (plan, submit,
    wait): freeze what the start built and collect at the usual pace again."""
    global _starting
    if _starting:
        _starting = False
        gc.freeze()
        gc.set_threshold(*_usual_thresholds)


def end() -> None:
    """The command is done and the process exits: freeze the heap, so that the exit does not collect it."""
    if _cli:
        gc.freeze()
