"""``python -m mlrecipe.serve``: start a local inference server (see :mod:`mlrecipe.serve.cli`)."""

from mlrecipe.serve.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
