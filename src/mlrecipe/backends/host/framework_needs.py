"""What a step's framework scripts import, so that a host backend checks the step's environment before it starts.

A recipe's ``framework:`` (or its chart's default) selects scripts that import their framework at once; a host
backend that runs the step in an environment without it would fail minutes later in the step's log. The imports are
the framework registry's (:mod:`mlrecipe.spec.frameworks`); checked with
:func:`mlrecipe.backends.host.images.environment_problems`, which names the command that installs each package.
"""

from __future__ import annotations

from mlrecipe.spec import frameworks
from mlrecipe.spec.load import StepSpec


def needs(step: StepSpec) -> tuple[str, ...]:
    """The Python packages the step's framework scripts import (none without a framework)."""
    return frameworks.imports_of(step.recipe.framework or step.chart.default_framework)
