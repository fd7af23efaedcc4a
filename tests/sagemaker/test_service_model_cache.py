"""The part of botocore's SageMaker model that validation reads, kept under ``$MLRECIPE_HOME/cache``: the same checks
as botocore's whole model, a new entry when botocore's version changes, a damaged entry replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import botocore
import botocore.session
import pytest
from botocore.exceptions import ParamValidationError
from botocore.validate import ParamValidator

from mlrecipe.backends.sagemaker import service_model

BAD_JOB = {"TrainingJobName": "x", "AlgorithmSpecification": {"TrainingInputMode": "File"}, "RoleArn": "r",
           "OutputDataConfig": {"S3OutputPath": "s3://b/o"}, "StoppingCondition": {"MaxRuntimeInSeconds": 0},
           "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": "2", "VolumeSizeInGB": 1}}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("MLRECIPE_HOME", str(tmp_path))
    service_model.service_model.cache_clear()
    yield tmp_path
    service_model.service_model.cache_clear()


def cached_files(home: Path) -> list[Path]:
    return sorted((home / service_model.CACHE_DIR).glob("botocore-sagemaker-*.json"))


def test_the_kept_part_checks_as_botocores_whole_model(home: Path) -> None:
    whole = botocore.session.get_session().get_service_model("sagemaker")
    for cold in (True, False):
        if not cold:
            service_model.service_model.cache_clear()
        for op in service_model.OPERATIONS:
            kept, full = service_model.input_shape(op), whole.operation_model(op).input_shape
            assert kept.members.keys() == full.members.keys()
        report = ParamValidator().validate(BAD_JOB, service_model.input_shape("CreateTrainingJob"))
        assert report.generate_report() == ParamValidator().validate(
            BAD_JOB, whole.operation_model("CreateTrainingJob").input_shape).generate_report()
        assert "InstanceCount" in report.generate_report()
        with pytest.raises(ParamValidationError):
            service_model.validate_request("CreateTrainingJob", BAD_JOB)
        assert len(cached_files(home)) == 1
    assert (service_model.service_model().shape_for("TrainingInstanceType").enum
            == whole.shape_for("TrainingInstanceType").enum)


def test_a_new_botocore_makes_a_new_entry_and_a_damaged_one_is_replaced(home: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    service_model.input_shape("CreateTrainingJob")
    [first] = cached_files(home)
    version = botocore.__version__
    monkeypatch.setattr(botocore, "__version__", version + ".post1")
    service_model.service_model.cache_clear()
    service_model.input_shape("CreateTrainingJob")
    assert len(cached_files(home)) == 2
    monkeypatch.setattr(botocore, "__version__", version)
    first.write_text('{"operations": {}}')
    service_model.service_model.cache_clear()
    assert service_model.input_shape("CreateModel").members
    assert '"CreateTrainingJob"' in first.read_text()


def test_planning_never_creates_the_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLRECIPE_HOME", str(tmp_path / "absent"))
    service_model.service_model.cache_clear()
    try:
        assert service_model.input_shape("CreateTrainingJob").members
    finally:
        service_model.service_model.cache_clear()
    assert not (tmp_path / "absent").exists()


def test_an_operation_not_kept_is_refused_by_name(home: Path) -> None:
    with pytest.raises(ValueError, match="DeleteEndpoint"):
        service_model.input_shape("DeleteEndpoint")
