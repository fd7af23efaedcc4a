"""Placeholder for code shared by the multimodal accelerate scripts (the reference ships it empty).

The vision-language scripts import ``shared.callbacks`` / ``shared.common`` from the accelerate folder (they put
``accelerate/`` on ``sys.path``), not this package.
"""
