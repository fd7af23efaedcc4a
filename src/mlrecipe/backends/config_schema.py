"""The JSON Schema of the config file (``$MLRECIPE_HOME/config.yaml``): one section per backend."""

from __future__ import annotations

from typing import Any

from mlrecipe.backends.registry import BACKENDS, backend_class


def config_schema() -> dict[str, Any]:
    """Every backend's options model as a section of one schema (described fields: editors' hover help)."""
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for name in sorted(BACKENDS):
        section = backend_class(name).options_type.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(section.pop("$defs", {}))
        properties[name] = section
    properties.update(_step_defaults())
    return {
        "title": "mlrecipe config file",
        "description": "$MLRECIPE_HOME/config.yaml: options of each backend under its name; --backend-opt "
        "key=value on the command line wins; watchdog: the hang detection of every step that sets none",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "$defs": defs,
    }


def _step_defaults() -> dict[str, Any]:
    """The config file's defaults for every step (:mod:`mlrecipe.spec.step_defaults`)."""
    from mlrecipe.spec.recipe import Watchdog

    schema = Watchdog.model_json_schema()
    schema["description"] = "Hang detection of every step whose recipe sets no watchdog (docs/operating.md)."
    return {"watchdog": schema}
