"""validate(): schema checks with pandera, drift against a reference, the report.

Real files on a local disk, no Ray: validation runs in the calling process."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from tasks import steps as core
from tasks.refs import CheckpointRef
from tasks.validation import DataValidationError, ValidationReport, validate


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("validate_storage"))


@pytest.fixture(scope="module")
def digits(storage):
    return core.ingest("sklearn:digits", storage=storage)


def _digits_frame() -> pd.DataFrame:
    from sklearn.datasets import load_digits

    return load_digits(as_frame=True).frame


def _ingest(frame: pd.DataFrame, tmp_path, storage, name: str):
    path = tmp_path / f"{name}.parquet"
    frame.to_parquet(path, index=False)
    return core.ingest(str(path), storage=storage, name=name)


def _report_files(report: ValidationReport):
    with open(os.path.join(report.report_uri, "report.json")) as f:
        data = json.load(f)
    with open(os.path.join(report.report_uri, "report.md")) as f:
        return data, f.read()


def test_clean_data_passes_and_the_report_is_written(digits, storage):
    report = validate(digits, pipeline="digits", storage=storage,
                      checks={"reference": digits})
    assert report.passed and not report.failures and not report.warnings
    assert report.dataset == digits
    assert len(report.drift) == 65 and not report.drifted  # the same data: no drift
    data, md = _report_files(report)
    assert data["passed"] is True and data["dataset"]["fingerprint"] == digits.fingerprint
    assert "**PASSED**" in md and "| `pixel_3_3` | psi | 0 | no |" in md
    assert report.report_uri == f"{digits.uri}-validation"


def test_without_a_production_model_drift_is_skipped_with_a_warning(digits, storage):
    report = validate(digits, pipeline="digits", storage=storage)
    assert report.passed and report.drift == []
    assert report.warnings == ["no drift check: no production model yet"]


def test_a_column_of_the_wrong_type_fails_naming_it(tmp_path, storage):
    frame = _digits_frame()
    frame["target"] = frame["target"].astype(str)
    data = _ingest(frame, tmp_path, storage, "digits-str-target")
    with pytest.raises(DataValidationError) as ei:
        validate(data, pipeline="digits", storage=storage)
    msg = str(ei.value)
    assert "column 'target': expected type int, found large_string" in msg
    assert "PipelineSpec.data_schema" in msg
    data_json, md = _report_files(ei.value.report)
    assert data_json["passed"] is False
    assert data_json["failures"] == [{"column": "target", "check": "type int", "count": 1,
                                      "examples": ["large_string"], "rows": []}]
    assert "**FAILED**" in md and "| `target` | type int |" in md


def test_nulls_where_none_are_allowed_name_the_rows(tmp_path, storage):
    frame = _digits_frame()
    frame.loc[[4, 17, 1500], "pixel_2_3"] = np.nan
    data = _ingest(frame, tmp_path, storage, "digits-nulls")
    with pytest.raises(DataValidationError,
                       match=r"column 'pixel_2_3': not nullable — 3 failing.*rows 4, 17, 1500"):
        validate(data, pipeline="digits", storage=storage)
    # nullable=True in a schema of one's own: passes.
    schema = {"columns": {"pixel_2_3": {"type": "float", "nullable": True}}}
    assert validate(data, schema=schema).passed


def test_a_category_never_allowed_fails_with_its_values(tmp_path, storage):
    frame = _digits_frame()
    frame.loc[[10, 11], "target"] = [11, 42]
    frame.loc[12, "pixel_0_1"] = 17.0
    data = _ingest(frame, tmp_path, storage, "digits-bad-label")
    with pytest.raises(DataValidationError) as ei:
        validate(data, pipeline="digits", storage=storage)
    failures = {(f["column"], f["check"]): f for f in ei.value.report.failures}
    label = failures[("target", "allowed values [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]")]
    assert label["examples"] == [11, 42] and label["rows"] == [10, 11]
    assert failures[("pixel_0_1", "max 16")]["examples"] == [17.0]
    assert "11, 42" in str(ei.value)


def _numbers(seed: int, shift: float = 0.0, n: int = 20_000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(shift, 1.0, n), "y": rng.normal(0, 1.0, n),
                         "kind": rng.choice(["a", "b", "c"], n)})


def test_a_shifted_distribution_warns_by_default_and_fails_when_configured(tmp_path,
                                                                           storage):
    base = _ingest(_numbers(0), tmp_path, storage, "numbers-base")
    same = _ingest(_numbers(1), tmp_path, storage, "numbers-same")
    shifted_frame = _numbers(2, shift=1.5)
    shifted_frame.loc[:99, "kind"] = "d"  # a category the reference never had
    shifted = _ingest(shifted_frame, tmp_path, storage, "numbers-shifted")
    schema = {"columns": {"x": {"type": "float"}, "y": {"type": "float"},
                          "kind": {"type": "string"}}}

    quiet = validate(same, schema, {"reference": base})
    assert quiet.passed and not quiet.drifted and not quiet.warnings

    warned = validate(shifted, schema, {"reference": base})
    assert warned.passed and warned.drifted == ["x"]
    row = next(r for r in warned.drift if r["column"] == "x")
    assert row["method"] == "psi" and row["statistic"] > 0.2
    kind = next(r for r in warned.drift if r["column"] == "kind")
    assert kind["new_categories"] == ["'d'"] and not kind["drifted"]
    assert any("column 'x' drifted: psi" in w for w in warned.warnings)
    _, md = _report_files(warned)
    assert "| `x` | psi |" in md and "**yes**" in md and "'d'" in md

    with pytest.raises(DataValidationError, match=r"(?s)error: column 'x' drifted: ks .*drift of \['x'\]"):
        validate(shifted, schema, {"reference": base,
                                   "drift": {"method": "ks", "threshold": 0.1, "fail": True}})


def test_drift_reference_defaults_to_the_production_models_training_data(tmp_path,
                                                                         storage):
    train = _ingest(_numbers(0), tmp_path, storage, "numbers-train")
    ckpt = CheckpointRef(uri=os.path.join(storage, "runs", "r", "checkpoint_000001"),
                         framework="torch", pipeline="numbers-pipe", data_uri=train.uri)
    core.promote(ckpt, {"checkpoint_uri": ckpt.uri}, gate={},
                 registry=os.path.join(storage, "models"))
    from pipelines import PipelineSpec, register_pipeline

    register_pipeline(PipelineSpec(
        name="numbers-pipe", description="", framework="torch", source=train.uri,
        label_column="y", make_trainer=lambda **kw: None, data_schema={"columns": {"x": {"type": "float"}}},
        drift={"threshold": 0.2, "fail": True}), replace=True)
    shifted = _ingest(_numbers(3, shift=2.0), tmp_path, storage, "numbers-new")
    with pytest.raises(DataValidationError) as ei:
        validate(shifted, pipeline="numbers-pipe", storage=storage)
    assert ei.value.report.reference["uri"] == train.uri
    assert ei.value.report.drifted == ["x"]


def test_malformed_schema_and_checks_say_what_to_use(digits):
    from engine.exceptions import ConfigError

    with pytest.raises(ConfigError, match="unknown keys \\['maximum'\\]"):
        validate(digits, {"columns": {"target": {"maximum": 3}}})
    with pytest.raises(ConfigError, match="unknown keys \\['drfit'\\]"):
        validate(digits, checks={"drfit": {}})
    with pytest.raises(ConfigError, match="use 'psi' or 'ks'"):
        validate(digits, checks={"reference": digits, "drift": {"method": "chi2"}})


def test_report_round_trips_as_json(digits):
    report = validate(digits, checks={"reference": digits, "min_rows": 10})
    again = ValidationReport.from_json(report.to_json())
    assert again == report and again.dataset == digits
