"""Specs: pydantic models of recipes and pipelines, loaded with file/line/field errors (pure data).

Import from the modules (``mlrecipe.spec.load``, ``.recipe``, ``.catalog``, ``.errors`` ...): this package imports
none of them, so that a light module here (``yamlfile``, ``errors``) does not load the recipe models with it.
"""
