"""``MLRECIPE_<STEP>_<NAME>``, the variables that carry a step's outputs to later steps, is spelled in one place
(``mlrecipe.spec.names``) that the runner, the SageMaker backend and ``compile kfp`` all use."""

from __future__ import annotations

import re

import pytest

from mlrecipe.backends.sagemaker.endpoint import artifacts_var
from mlrecipe.kfp.step import inputs_env
from mlrecipe.runner.release import outputs_env, url_var
from mlrecipe.spec.names import NAME_PATTERN, step_output_var, step_outputs_prefix
from tests.repo import REPO


@pytest.mark.parametrize(("step", "name", "variable"), [
    ("train", "url", "MLRECIPE_TRAIN_URL"),
    ("data-prep", "model_artifacts", "MLRECIPE_DATA_PREP_MODEL_ARTIFACTS"),
    ("serve-2-b", "endpoint_name", "MLRECIPE_SERVE_2_B_ENDPOINT_NAME"),
    ("0", "job-name", "MLRECIPE_0_JOB_NAME"),
    ("a-b", "Url", "MLRECIPE_A_B_URL"),
])
def test_the_variable_of_a_step_output(step: str, name: str, variable: str) -> None:
    assert step_output_var(step, name) == variable
    assert variable.startswith(step_outputs_prefix(step))


@pytest.mark.parametrize("step", ["train", "data-prep", "serve-2-b", "0", "x-1-y-2"])
def test_every_user_spells_it_the_same(step: str) -> None:
    assert re.match(NAME_PATTERN, step)
    outputs = {"model_artifacts": "s3://b/m.tar.gz", "job_name": "j", "endpoint_name": "e", "url": "http://h"}
    expected = {step_output_var(step, name): value for name, value in outputs.items()}
    assert outputs_env(step, outputs) == expected == inputs_env(step, outputs)
    assert url_var(step) == step_output_var(step, "url")
    assert artifacts_var(step) == step_output_var(step, "model_artifacts")


def test_no_other_module_composes_the_names() -> None:
    src = REPO / "src" / "mlrecipe"
    composing = re.compile(r"""["']MLRECIPE_["']\s*\+|f["']MLRECIPE_\{""")
    spelled = sorted(str(path.relative_to(src)) for path in src.rglob("*.py")
                     if composing.search(path.read_text(encoding="utf-8")))
    assert spelled == [], f"MLRECIPE_<STEP>_<NAME> spelled outside spec/names.py: {spelled}"
