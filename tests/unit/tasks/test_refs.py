"""References, run names, gates and search spaces: the JSON that crosses orchestrators."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.exceptions import ConfigError
from tasks import registry as _registry
from tasks.steps import _training
from tasks import run_name_for
from tasks.refs import CheckpointRef, DatasetRef, Promotion, RefError, TuneRef


def _dataset() -> DatasetRef:
    return DatasetRef(uri="/data/ty/datasets/digits-1d9943c49bc3", format="parquet",
                      num_rows=1797, schema={"pixel_0_0": "double", "target": "int64"},
                      fingerprint="1d9943c49bc3" * 5, name="digits",
                      metadata={"source": "sklearn:digits"})


def _checkpoint(**kw) -> CheckpointRef:
    fields = dict(uri="s3://bucket/ty/runs/digits-train-abc/checkpoint_000004",
                  framework="torch", metrics={"accuracy": 0.97, "epoch": 4,
                                              "loss": float("nan")},
                  config={"lr": 0.005, "hidden": 64, "epochs": 5}, run_name="digits-train-abc",
                  created_at=1795656615.8, data_fingerprint="ab" * 32, pipeline="digits",
                  run_uri="s3://bucket/ty/runs/digits-train-abc", storage="s3://bucket/ty")
    fields.update(kw)
    return CheckpointRef(**fields)


def _tune() -> TuneRef:
    return TuneRef(best=_checkpoint(), best_config={"lr": 0.005, "hidden": 64},
                   metric="accuracy", mode="max",
                   trials=[{"trial_id": "a_00000", "config/lr": 0.001, "accuracy": 0.8},
                           {"trial_id": "a_00001", "config/lr": 0.005, "accuracy": 0.97}],
                   experiment_uri="s3://bucket/ty/runs/digits-tune-abc")


def _promotion() -> Promotion:
    return Promotion(promoted=False, alias="production", pipeline="digits",
                     checkpoint=_checkpoint(), reasons=["accuracy 0.97 >= 0.99: FAIL"],
                     pointer_uri="/m/digits/production.json", entry_uri="/m/h/1.json",
                     previous=_checkpoint(uri="/old/checkpoint_000001"))


REFS = [_dataset, _checkpoint, _tune, _promotion]


def _same(a, b) -> bool:
    # NaN != NaN: compare the JSON texts, which spell NaN the same way.
    return a.to_json() == b.to_json()


@pytest.mark.parametrize("make", REFS, ids=lambda f: f.__name__.strip("_"))
def test_json_round_trip_gives_an_equal_reference(make):
    ref = make()
    text = ref.to_json()
    back = type(ref).from_json(text)
    assert type(back) is type(ref) and _same(back, ref)
    assert json.loads(text) == json.loads(back.to_json())
    assert _same(type(ref).from_dict(json.loads(text)), ref)


@pytest.mark.parametrize("make", REFS, ids=lambda f: f.__name__.strip("_"))
def test_prefect_json_serializer_and_pickle_round_trip(make):
    from prefect.serializers import JSONSerializer, PickleSerializer

    ref = make()
    for serializer in (JSONSerializer(), PickleSerializer()):
        back = serializer.loads(serializer.dumps(ref))
        assert type(back) is type(ref) and _same(back, ref), serializer.type
    # Nested inside a task's return value, as split() returns them.
    payload = {"train": ref, "validation": ref}
    back = JSONSerializer().loads(JSONSerializer().dumps(payload))
    assert _same(back["train"], ref) and _same(back["validation"], ref)


def test_nested_references_come_back_typed():
    tuned = TuneRef.from_json(_tune().to_json())
    assert isinstance(tuned.best, CheckpointRef) and tuned.best.pipeline == "digits"
    promo = Promotion.from_json(_promotion().to_json())
    assert isinstance(promo.previous, CheckpointRef)
    assert promo.previous.uri == "/old/checkpoint_000001"


def test_unknown_and_missing_fields_are_errors_naming_them():
    data = _dataset().to_dict()
    with pytest.raises(RefError, match=r"no fields \['num_row'\]"):
        DatasetRef.from_dict({**data, "num_row": 3})
    data.pop("fingerprint")
    with pytest.raises(RefError, match="fingerprint"):
        DatasetRef.from_dict(data)
    with pytest.raises(RefError, match="not JSON"):
        DatasetRef.from_json("{nope")
    with pytest.raises(RefError, match="expects a dict"):
        CheckpointRef.from_dict(["uri"])


def test_older_payloads_without_optional_fields_still_load():
    ref = CheckpointRef.from_dict({"uri": "/r/checkpoint_000000", "framework": "torch"})
    assert ref.metrics == {} and ref.pipeline is None


@pytest.mark.parametrize("kwargs, match", [
    ({"num_rows": -1}, "num_rows"),
    ({"num_rows": True}, "num_rows"),
    ({"format": "orc"}, "format"),
    ({"uri": ""}, "uri"),
    ({"metadata": {"x": np.float32(1.0)}}, r"\.item\(\)"),
])
def test_invalid_dataset_ref_says_which_field(kwargs, match):
    fields = _dataset().to_dict()
    fields.update(kwargs)
    with pytest.raises(RefError, match=match):
        DatasetRef(**fields)


def test_checkpoint_ref_rejects_non_json_metrics():
    with pytest.raises(RefError, match="metrics"):
        _checkpoint(metrics={"accuracy": np.array([0.9])})


def test_run_name_is_stable_per_run_and_task_and_safe_in_paths():
    a = run_name_for("8421c08f-f85b-4e75-b4fb-207520837483", "train", prefix="digits")
    assert a == "digits-train-8421c08f-f85b-4e75-b4fb-207520837483"
    assert a == run_name_for("8421c08f-f85b-4e75-b4fb-207520837483", "train", "digits")
    assert run_name_for("same", "tune") != run_name_for("same", "train")
    airflow = run_name_for("scheduled__2026-01-05T03:00:00+00:00", "train", "retrain_dag")
    assert "/" not in airflow and ":" not in airflow and "+" not in airflow
    assert airflow.startswith("retrain_dag-train-scheduled__2026-01-05T03-00-00-00-00")
    long = run_name_for("x" * 500, "train")
    assert len(long) == 120 and long != run_name_for("x" * 499 + "y", "train")
    with pytest.raises(ConfigError, match="needs both"):
        run_name_for("", "train")


def test_gate_conditions_parse_and_decide():
    conds = _registry.parse_gate({"accuracy": ">=0.9", "log_loss": "< 0.5"})
    assert conds == [("accuracy", ">=", 0.9), ("log_loss", "<", 0.5)]
    ok, reasons = _registry.check_gate(conds, {"accuracy": 0.95, "log_loss": 0.2})
    assert ok and all(r.endswith("pass") for r in reasons)
    ok, reasons = _registry.check_gate(conds, {"accuracy": 0.85, "log_loss": 0.2})
    assert not ok and reasons[0] == "accuracy 0.85 >= 0.9: FAIL"
    # An undefined metric (None, NaN) never passes.
    assert not _registry.check_gate(conds, {"accuracy": None, "log_loss": 0.1})[0]
    assert not _registry.check_gate(conds, {"accuracy": float("nan"), "log_loss": 0.1})[0]
    assert _registry.check_gate([], {})[0]


@pytest.mark.parametrize("gate", [{"accuracy": 0.9}, {"accuracy": "0.9"},
                                  {"accuracy": "=>0.9"}, ["accuracy"]])
def test_malformed_gate_says_how_to_write_one(gate):
    with pytest.raises(ConfigError, match=r"'>=0\.9'"):
        _registry.parse_gate(gate)


def test_gate_on_a_metric_evaluate_did_not_return_lists_the_ones_it_did():
    with pytest.raises(ConfigError, match=r"'acc'.*\['accuracy', 'f1'\]"):
        _registry.check_gate([("acc", ">=", 0.9)],
                             {"accuracy": 0.9, "f1": 0.8, "labels": [0, 1]})


def test_param_space_json_form_becomes_search_objects():
    from engine.tune.search import Categorical, Float, Integer

    space = _training.parse_param_space({
        "lr": {"loguniform": [1e-4, 1e-1]}, "hidden": {"grid_search": [32, 64]},
        "act": {"choice": ["relu", "tanh"]}, "depth": {"randint": [2, 6]}, "epochs": 3})
    assert isinstance(space["lr"], Float) and isinstance(space["act"], Categorical)
    assert isinstance(space["depth"], Integer)
    assert space["hidden"] == {"grid_search": [32, 64]} and space["epochs"] == 3
    with pytest.raises(ConfigError, match="exactly one"):
        _training.parse_param_space({"lr": {"uniform": [0, 1], "choice": [1]}})
    with pytest.raises(ConfigError, match="takes a list"):
        _training.parse_param_space({"lr": {"uniform": 0.1}})


def test_run_settings_and_scaling_reject_unknown_keys():
    with pytest.raises(ConfigError, match=r"unknown keys \['epochs'\]"):
        _training.RunSettings.parse({"epochs": 3})
    with pytest.raises(ConfigError, match=r"unknown keys \['workers'\]"):
        _training.scaling_config({"workers": 2})
    assert _training.scaling_config({"num_workers": 3}).num_workers == 3
    assert _training.RunSettings.parse({"name": "x", "config": {"lr": 1}}).config == {"lr": 1}


def test_json_safe_converts_numpy_and_keeps_nan():
    out = _training.json_safe({"a": np.float32(0.5), "b": np.int64(3), "c": np.arange(2),
                               "d": float("nan"), "e": (1, 2)})
    assert out["a"] == 0.5 and out["b"] == 3 and out["c"] == [0, 1] and out["e"] == [1, 2]
    assert out["d"] != out["d"]
    json.dumps(out)
