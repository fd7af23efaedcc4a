"""The CLI process's own start and exit, kept cheap: they sit between a user's command and the first training step.

Measured on the 2-core CPU machine (``benchmarks/bench_first_step.py``), an ``install`` spent, besides its imports:
some 90 garbage collections (about 14 ms) over the ~40,000 objects that its imports create and that live until it
exits; pydantic's look for plugins in every installed distribution's entry points (about 30 ms; mlrecipe uses
none); and, at exit, the interpreter's last collections over the same objects (about 40 ms).

- :func:`begin` (first thing in ``main``, or as the ``mlrecipe`` program starts importing the CLI:
  :func:`begin_if_program`): collect young objects only every ``START_GC_THRESHOLD`` allocations
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
from types import ModuleType

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


def begin_if_program(argv0: str) -> None:
    """:func:`begin` already while the CLI's modules load, in the ``mlrecipe`` program (``argv0`` names it): a
    console script installed before :mod:`mlrecipe.cli.entry` existed imports ``mlrecipe.cli.app`` (Typer and its
    ~40,000 objects, 5-10 ms of collections at the usual pace) before ``main`` runs; the entry itself begins before
    it imports Typer. A process that imports the CLI as a library is left alone."""
    if argv0.replace("\\", "/").rsplit("/", 1)[-1] in ("mlrecipe", "mlrecipe.exe"):
        begin()


def skip_pydantic_plugins() -> None:
    """Spare the CLI pydantic's scan of every installed distribution for plugins (mlrecipe uses none).

    Only in the CLI process, and not when ``PYDANTIC_DISABLE_PLUGINS`` says what to load: the steps it starts
    (their own Python) look for plugins as usual. Pydantic keeps the plugins it found in ``_loader._plugins``
    (``None``: not looked for yet); a pydantic without it is left alone. When pydantic has not loaded ``_loader`` yet,
    a stand-in with no plugins takes its place (:class:`_NoPluginsLoader`), which also spares the CLI
    ``importlib.metadata`` (10-20 ms), imported by the real one only to scan the distributions.
    """
    import os
    import sys

    if not _cli or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return
    loader = sys.modules.get(_PYDANTIC_LOADER)
    if loader is None:
        import pydantic.plugin

        sys.modules[_PYDANTIC_LOADER] = pydantic.plugin._loader = _NoPluginsLoader(_PYDANTIC_LOADER)  # type: ignore[attr-defined]
    elif getattr(loader, "_plugins", {}) is None:
        loader._plugins = {}  # type: ignore[attr-defined]


_PYDANTIC_LOADER = "pydantic.plugin._loader"


class _NoPluginsLoader(ModuleType):
    """Stands for ``pydantic.plugin._loader`` in the CLI: ``get_plugins`` finds none (as the real one does with
    ``_plugins = {}``); any other name pydantic asks for loads the real module (its plugins skipped likewise) and
    takes it from there."""

    _plugins: dict[str, object] = {}

    @staticmethod
    def get_plugins() -> tuple[()]:
        """No plugins: the CLI uses none."""
        return ()

    def __getattr__(self, name: str) -> object:
        import importlib
        import sys

        if name.startswith("__"):  # the import system's own questions (__path__, ...): a plain module's answers
            raise AttributeError(name)
        if sys.modules.get(_PYDANTIC_LOADER) is self:
            del sys.modules[_PYDANTIC_LOADER]
        real = importlib.import_module(_PYDANTIC_LOADER)
        real._plugins = {}  # type: ignore[attr-defined]
        return getattr(real, name)


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
