"""What a step's framework scripts import, so that a host backend checks the step's environment before it starts.

A recipe's ``framework:`` (or its chart's default) selects scripts that import their framework at once; a host
backend that runs the step in an environment without it would fail minutes later in the step's log. Checked with
:func:`mlrecipe.backends.host.images.environment_problems`, which names the command that installs each package.
"""

from __future__ import annotations

from mlrecipe.spec.load import StepSpec

#: framework -> the import names its scripts need (vllm-* folders: the serving chart's own needs cover them)
FRAMEWORK_PACKAGES: dict[str, tuple[str, ...]] = {
    "accelerate": ("accelerate", "peft", "transformers"),
    "pytorch_lightning": ("lightning", "transformers"),
    "nemo2": ("nemo", "nemo_run"),
    "ray_train": ("ray", "transformers"),
    "encoder_transformers": ("transformers",),
    "megatron": ("numpy", "tokenizers", "zstandard"),
}


def needs(step: StepSpec) -> tuple[str, ...]:
    """The Python packages the step's framework scripts import (none without a framework)."""
    framework = step.recipe.framework or step.chart.default_framework
    return FRAMEWORK_PACKAGES.get(framework or "", ())
