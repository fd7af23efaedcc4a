"""The pattern of release, namespace and step names (DNS-label-like), and the variables that carry a step's outputs
to later steps (``MLRECIPE_<STEP>_<NAME>``), on their own so that reading an address does not load the pipeline
models."""

from __future__ import annotations

import re

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

#: The prefix of the variables that carry a step's outputs to the steps after it.
STEP_OUTPUT_PREFIX = "MLRECIPE_"


def _env_word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def step_outputs_prefix(step: str) -> str:
    """The prefix of the variables that carry ``step``'s outputs to later steps: ``MLRECIPE_<STEP>_``.

    The step's name upper-cased, each character other than a letter or digit (a step name's ``-``) as ``_``:
    ``train-2`` -> ``MLRECIPE_TRAIN_2_``.
    """
    return f"{STEP_OUTPUT_PREFIX}{_env_word(step)}_"


def step_output_var(step: str, name: str) -> str:
    """The variable that carries ``step``'s output ``name`` to later steps: ``MLRECIPE_<STEP>_<NAME>`` (a serving
    step's ``url``, a SageMaker training step's ``model_artifacts`` ...), spelled as :func:`step_outputs_prefix`
    spells the step: ``step_output_var("train-2", "model_artifacts")`` is ``MLRECIPE_TRAIN_2_MODEL_ARTIFACTS``.

    The one place the contract is spelled: the runner, the backends and ``compile kfp`` all call it.
    """
    return step_outputs_prefix(step) + _env_word(name)
