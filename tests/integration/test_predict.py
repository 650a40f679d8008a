"""Batch prediction and evaluation on a real local Ray with real Ray Data: checkpoints
from real training runs, actor pools, Parquet in and out, preprocessors, bad input."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import numpy as np
import pandas as pd
import pytest

from engine import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from engine.exceptions import ConfigError, FrameworkMismatchError, MissingColumnsError
from engine.predict import BatchPredictor, evaluate
from pipelines import digits

torch = pytest.importorskip("torch")
from engine.torch import TorchCheckpoint, TorchPredictor, TorchTrainer  # noqa: E402

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")



class RecordingTorchPredictor(TorchPredictor):
    """A TorchPredictor that leaves one file per model load (pid in the name) in
    ``marker_dir``: how the tests see which actors started and how often each loaded."""

    @classmethod
    def _from_checkpoint(cls, checkpoint, marker_dir=None, **kwargs):
        if marker_dir:
            path = os.path.join(marker_dir, f"{os.getpid()}-{uuid.uuid4().hex}")
            open(path, "w").close()
        return super()._from_checkpoint(checkpoint, **kwargs)


def _loads_by_pid(marker_dir) -> dict:
    pids: dict = {}
    for name in os.listdir(marker_dir):
        pid = name.split("-")[0]
        pids[pid] = pids.get(pid, 0) + 1
    return pids


def _model_from(checkpoint, model):
    model.load_state_dict(checkpoint.to_dict()["model_weights"])
    return model.eval()


def _run(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.ascontiguousarray(x), dtype=torch.float32)).numpy()


# --- trained models (one training run each per module) ---------------------------------
@pytest.fixture(scope="module")
def digits_result(ray_session, tmp_path_factory):
    """The digits MLP trained briefly by pipelines.digits.train_func on 2 DDP workers."""
    trainer = TorchTrainer(
        digits.train_func,
        train_loop_config={"epochs": 3, "lr": 3e-3, "batch_size": 64, "seed": 0},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("digits")),
                             checkpoint_config=CheckpointConfig(num_to_keep=1)),
        metadata={"feature_columns": ["x"], "label_column": "y"})
    return trainer.fit()


def _linear_train_func(config):
    """A linear model on this worker's (already scaled) x1, x2; rank 0's checkpoint."""
    import engine

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = engine.get_dataset_shard("train")
    for _ in range(config["epochs"]):
        for batch in shard.iter_batches(batch_size=64, batch_format="numpy"):
            x = torch.tensor(np.column_stack([batch["x1"], batch["x2"]]), dtype=torch.float32)
            y = torch.tensor(batch["y"], dtype=torch.float32)[:, None]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    ckpt = None
    if engine.get_context().get_world_rank() == 0:
        ckpt = engine.Checkpoint.from_dict({"model_weights": model.state_dict()})
    engine.report({"loss": float(loss)}, checkpoint=ckpt)


def _raw_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(100.0, 20.0, n), rng.normal(-5.0, 0.5, n)
    return pd.DataFrame({"id": np.arange(n), "x1": x1, "x2": x2,
                         "y": 0.05 * x1 + 2.0 * x2 + rng.normal(0, 0.1, n)})


@pytest.fixture(scope="module")
def scaled_result(ray_session, tmp_path_factory):
    """A linear model trained with StandardScaler(["x1", "x2"]) attached to the trainer."""
    from engine.preprocessors import StandardScaler

    trainer = TorchTrainer(
        _linear_train_func, train_loop_config={"epochs": 5},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("scaled"))),
        datasets={"train": _raw_frame(512, 0)},
        preprocessor=StandardScaler(["x1", "x2"]),
        metadata={"feature_columns": ["x1", "x2"], "label_column": "y"})
    return trainer.fit()


# --- the digits MLP ---------------------------------------------------------------------
def test_digits_batch_predictions_equal_in_process_ones_in_input_order(ray_start_4_cpus,
                                                                       digits_result):
    import ray.data

    ckpt = digits_result.checkpoint
    card = ckpt.get_model_card()
    assert card["framework"] == "torch" and card["feature_columns"] == ["x"]
    _, _, X_val, y_val = digits.load_digits_split()
    order = np.random.default_rng(1).permutation(len(X_val))  # ids not sorted: order shows
    ds = ray.data.from_items([{"id": int(i), "x": X_val[i], "y": int(y_val[i])}
                              for i in order], override_num_blocks=8)

    out = BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=digits.build_model()
                                         ).predict(ds, batch_size=32, num_workers=2,
                                                   keep_columns=["id"])
    rows = out.to_pandas()
    assert list(rows.columns) == ["id", "predictions"]
    assert rows["id"].tolist() == order.tolist()              # the input's order
    batch_preds = np.stack(rows["predictions"].to_numpy())
    model = _model_from(ckpt, digits.build_model())
    np.testing.assert_allclose(batch_preds, _run(model, X_val[order]), rtol=1e-5, atol=1e-6)
    in_process = TorchPredictor.from_checkpoint(ckpt, model=digits.build_model()).predict(
        pd.DataFrame({"x": list(X_val[order]), "y": y_val[order]}))
    np.testing.assert_allclose(batch_preds, np.stack(in_process["predictions"].to_numpy()),
                               rtol=1e-5, atol=1e-6)


def test_evaluate_digits_returns_metrics_and_writes_the_confusion_matrix(
        ray_start_4_cpus, digits_result, tmp_path):
    from sklearn import metrics as skm

    ckpt = digits_result.checkpoint
    val = digits.digits_datasets()["validation"]
    report = evaluate(ckpt, val, output_dir=str(tmp_path), model=digits.build_model())

    assert report["task"] == "classification" and report["label_column"] == "y"  # the card's
    _, _, X_val, y_val = digits.load_digits_split()
    assert report["num_rows"] == len(y_val)
    assert report["accuracy"] == pytest.approx(digits.evaluate_checkpoint(ckpt))
    assert report["accuracy"] > 0.5  # three epochs learn something
    logits = _run(_model_from(ckpt, digits.build_model()), X_val)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    assert report["f1"] == pytest.approx(skm.f1_score(y_val, logits.argmax(1), average="macro"))
    assert report["log_loss"] == pytest.approx(skm.log_loss(y_val, probs), rel=1e-4)
    assert report["roc_auc"] == pytest.approx(skm.roc_auc_score(y_val, probs,
                                                                multi_class="ovr"), rel=1e-4)
    assert report["confusion_matrix_path"] == str(tmp_path / "confusion_matrix.png")
    with open(report["confusion_matrix_path"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert np.trace(report["confusion_matrix"]) == round(report["accuracy"] * len(y_val))
    json.dumps(report)  # small and JSON-able: what a pipeline task passes on


# --- scale: 1M rows of Parquet through 2 actors ---------------------------------------
def test_one_million_rows_through_two_actors_written_to_parquet(ray_start_4_cpus, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    n, width = 1_000_000, 4
    X = np.random.default_rng(0).random((n, width), dtype=np.float32)
    src = tmp_path / "features"
    src.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(n), 2)):
        pq.write_table(pa.table({"id": rows, **{f"f{j}": X[rows, j] for j in range(width)}}),
                       str(src / f"part-{part}.parquet"), row_group_size=100_000)
    torch.manual_seed(0)
    model = torch.nn.Linear(width, 1)
    markers = tmp_path / "loads"
    markers.mkdir()

    out = BatchPredictor.from_checkpoint(
        TorchCheckpoint.from_model(model), RecordingTorchPredictor,
        model=torch.nn.Linear(width, 1), marker_dir=str(markers),
    ).predict(str(src), batch_size=8192, num_workers=2, keep_columns=["id"],
              output_uri=str(tmp_path / "scores"))

    written = pq.read_table(str(tmp_path / "scores"))
    assert written.num_rows == n
    assert out.count() == n
    ids = written["id"].to_numpy()
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))   # every row exactly once
    expected = _run(model, X[ids])[:, 0]
    np.testing.assert_allclose(written["predictions"].to_numpy(), expected, rtol=1e-5,
                               atol=1e-6)
    loads = _loads_by_pid(markers)
    # At most 2 actors, each loading the model once. Ray Data hands blocks to whichever
    # actor is ready: on a loaded machine the first one can score everything before the
    # second has started, so one actor alone is a valid run.
    assert 1 <= len(loads) <= 2 and set(loads.values()) == {1}, loads


# --- preprocessors ------------------------------------------------------------------------
def test_preprocessor_from_training_is_applied_at_prediction(ray_start_4_cpus,
                                                            scaled_result):
    import ray.data

    ckpt = scaled_result.checkpoint
    scaler = ckpt.get_preprocessor()
    assert scaler is not None and scaler.columns == ["x1", "x2"]
    raw = _raw_frame(300, 5)
    out = BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=torch.nn.Linear(2, 1)
                                         ).predict(ray.data.from_pandas(raw), batch_size=64,
                                                   keep_columns=["id"]).to_pandas()
    assert out["id"].tolist() == raw["id"].tolist()
    model = _model_from(ckpt, torch.nn.Linear(2, 1))
    scaled = scaler.transform_batch(raw)[["x1", "x2"]].to_numpy()
    np.testing.assert_allclose(out["predictions"].to_numpy(), _run(model, scaled)[:, 0],
                               rtol=1e-5, atol=1e-5)
    skipped = _run(model, raw[["x1", "x2"]].to_numpy())[:, 0]
    assert np.abs(out["predictions"].to_numpy() - skipped).min() > 1.0  # skipping shows
    # The fit is good only on scaled inputs: evaluate() on raw rows applies the scaler.
    report = evaluate(ckpt, raw, model=torch.nn.Linear(2, 1))
    assert report["task"] == "regression" and report["r2"] > 0.9


# --- bad input ----------------------------------------------------------------------------
def test_missing_feature_column_fails_before_any_actor_starts(ray_start_4_cpus,
                                                              scaled_result, tmp_path):
    import ray.data

    markers = tmp_path / "loads"
    markers.mkdir()
    bp = BatchPredictor.from_checkpoint(scaled_result.checkpoint, RecordingTorchPredictor,
                                        model=torch.nn.Linear(2, 1), marker_dir=str(markers))
    raw = _raw_frame(100, 1).drop(columns=["x2"])
    path = tmp_path / "no_x2.parquet"
    raw.to_parquet(path)
    for data in (ray.data.from_pandas(raw), str(path)):
        with pytest.raises(MissingColumnsError) as info:
            bp.predict(data, num_workers=2, keep_columns=["id", "row_key"])
        assert info.value.missing == ["x2", "row_key"]
        message = str(info.value)
        assert "'x2'" in message and "'row_key'" in message and "model card" in message
    assert os.listdir(markers) == []  # no actor loaded the model


def test_checkpoint_of_another_framework_names_both(ray_start_4_cpus, scaled_result,
                                                    tmp_path):
    import ray.data

    copy = tmp_path / "xgb_checkpoint"
    shutil.copytree(scaled_result.checkpoint.path, copy)
    card_path = copy / "model_card.json"
    card = json.loads(card_path.read_text())
    card.update(framework="xgboost", trainer="XGBoostTrainer")
    card_path.write_text(json.dumps(card))
    ckpt = Checkpoint.from_directory(str(copy))
    with pytest.raises(FrameworkMismatchError) as info:
        BatchPredictor.from_checkpoint(ckpt, TorchPredictor, model=torch.nn.Linear(2, 1))
    assert "'xgboost'" in str(info.value) and "'torch'" in str(info.value)
    # Without predictor_cls, the card's framework picks the predictor; a framework with
    # no predictor registered says so.
    card.update(framework="jax", trainer="JaxTrainer")
    card_path.write_text(json.dumps(card))
    with pytest.raises(ConfigError, match="No predictor is registered for framework 'jax'"):
        evaluate(ckpt, ray.data.from_pandas(_raw_frame(10, 2)))
