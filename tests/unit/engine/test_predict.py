"""Predictors and evaluation without a cluster: batches in process, loading, columns,
the framework check, task inference and metrics (scikit-learn as the reference)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engine import Checkpoint, constants
from engine._internal.data import batches
from engine.exceptions import (CheckpointError, ConfigError, FrameworkMismatchError,
                               MissingColumnsError)
from engine.predict import (BatchPredictor, Predictor, evaluate, get_predictor_class,
                            register_predictor)
from engine.preprocessors import Chain, MinMaxScaler, Preprocessor, StandardScaler, dumps

torch = pytest.importorskip("torch")
from engine.torch import TorchCheckpoint, TorchPredictor  # noqa: E402


class DoubleA(Preprocessor):
    """A custom (pickled) preprocessor that makes a new column: its inputs are unknown."""

    _is_fittable = False

    def transform_batch(self, batch):
        out = batch.copy()
        out["a2"] = batch["a"] * 2.0
        return out


def _linear(n_in: int = 2, n_out: int = 1, seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out)


def _checkpoint(path, model, card=None, preprocessor=None) -> Checkpoint:
    """A checkpoint directory as a trainer leaves it: a dict checkpoint holding
    ``model_weights``, plus the model card and the preprocessor when given."""
    path.mkdir()
    with open(path / constants.DICT_CHECKPOINT_FILE, "wb") as f:
        torch.save({"epoch": 0, "model_weights": model.state_dict()}, f)  # as from_dict
    if card is not None:
        (path / constants.MODEL_CARD_FILE).write_text(json.dumps(card))
    if preprocessor is not None:
        name, data = dumps(preprocessor)
        (path / name).write_bytes(data)
    return Checkpoint.from_directory(str(path))


def _torch_out(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.ascontiguousarray(x), dtype=torch.float32)).numpy()


# --- import weight --------------------------------------------------------------------
def test_importing_engine_predict_imports_no_framework():
    code = ("import sys, engine, engine.predict; "
            "print([m for m in ('torch', 'sklearn', 'matplotlib', 'ray.data', 'pyarrow') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    # An actor unpickling the scoring class imports its module first: no import cycle.
    subprocess.run([sys.executable, "-c", "import engine._internal.data.batch_predictor"],
                   check=True)


def test_a_driver_building_a_torch_trainer_imports_no_torch():
    """A Ray job's fresh driver builds the trainer and pickles train_func; torch is for
    the workers (issue 19: seconds of a ray_job step's start). The helpers resolve on
    first use."""
    code = ("import sys; from engine.torch import TorchTrainer, TorchConfig; "
            "from pipelines import get_pipeline; get_pipeline('digits'); "
            "print('torch' in sys.modules); "
            "from engine.torch import prepare_model, TorchPredictor; import engine.torch; "
            "print('torch' in sys.modules, engine.torch.TorchCheckpoint.__name__, "
            "callable(engine.torch.get_device), 'prepare_model' in dir(engine.torch))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "TorchCheckpoint", "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'prepare_modle'"):
        import engine.torch

        engine.torch.prepare_modle  # noqa: B018 - a typo stays an AttributeError


def test_registry_resolves_torch_lazily_and_names_known_frameworks():
    assert get_predictor_class("torch") is TorchPredictor
    with pytest.raises(ConfigError, match=r"'jax'.*known: \[.*'torch'.*'xgboost'"):
        get_predictor_class("jax")

    class Custom(Predictor):
        framework = "unit-test-framework"

    assert get_predictor_class("unit-test-framework") is Custom  # registered on definition
    register_predictor("unit-test-framework", "engine.torch.predictor:TorchPredictor")
    assert get_predictor_class("unit-test-framework") is TorchPredictor


# --- batches ----------------------------------------------------------------------------
def test_feature_matrix_tensor_column_as_is_scalar_columns_stacked_in_order():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert batches.feature_matrix({"x": x}, ["x"]) is x
    cols = {"b": np.array([1.0, 2.0]), "a": np.array([10.0, 20.0])}
    np.testing.assert_array_equal(batches.feature_matrix(cols, ["a", "b"]),
                                  [[10.0, 1.0], [20.0, 2.0]])
    np.testing.assert_array_equal(batches.feature_matrix(cols, ["b"]), [[1.0], [2.0]])
    mixed = {"v": np.ones((2, 2)), "s": np.array([5.0, 6.0])}
    np.testing.assert_array_equal(batches.feature_matrix(mixed, ["s", "v"]),
                                  [[5.0, 1.0, 1.0], [6.0, 1.0, 1.0]])


def test_pandas_column_of_arrays_becomes_one_array():
    df = pd.DataFrame({"x": [np.array([1.0, 2.0]), np.array([3.0, 4.0])], "n": [1, 2]})
    cols = batches.to_columns(df)
    assert cols["x"].shape == (2, 2) and cols["n"].dtype.kind == "i"


def test_feature_columns_precedence():
    card = {"feature_columns": ["b", "a"], "label_column": "y"}
    assert batches.resolve_feature_columns(["a"], card, ["a", "b", "y"]) == ["a"]
    assert batches.resolve_feature_columns(None, card, ["a", "b", "y"]) == ["b", "a"]
    assert batches.resolve_feature_columns(None, {"label_column": "y"},
                                           ["a", "id", "y"], exclude=["id"]) == ["a"]


def test_missing_columns_error_lists_each_missing_column_and_why():
    with pytest.raises(MissingColumnsError) as info:
        batches.check_columns(["a", "id"], {"feature columns from the model card": ["a", "b"],
                                            "keep_columns given": ["id", "c"]}, "The dataset")
    assert info.value.missing == ["b", "c"]
    assert "['b', 'c']" in str(info.value) and "model card" in str(info.value)
    clone = pickle.loads(pickle.dumps(info.value))  # crosses actors
    assert clone.missing == ["b", "c"] and str(clone) == str(info.value)


def test_preprocessor_input_columns():
    assert batches.preprocessor_columns(None) == []
    chain = Chain(StandardScaler(["a"]), MinMaxScaler(["b", "a"]))
    assert batches.preprocessor_columns(chain) == ["a", "b"]
    assert batches.preprocessor_columns(object()) is None  # custom: unknown


# --- TorchPredictor -----------------------------------------------------------------------
def test_state_dict_from_dict_checkpoint_dataframe_in_dataframe_out(tmp_path):
    model = _linear(2, 1)
    ckpt = _checkpoint(tmp_path / "c", model)
    predictor = TorchPredictor.from_checkpoint(ckpt, model=_linear(2, 1, seed=1))
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [0.5, -1.0, 2.0]}, index=[7, 8, 9])
    out = predictor.predict(df)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["predictions"]
    assert list(out.index) == [7, 8, 9]
    expected = _torch_out(model, df[["a", "b"]].to_numpy())[:, 0]  # (n, 1) is flattened
    np.testing.assert_allclose(out["predictions"].to_numpy(), expected, rtol=1e-6)
    as_dict = predictor.predict({"a": df["a"].to_numpy(), "b": df["b"].to_numpy()})
    assert set(as_dict) == {"predictions"}
    np.testing.assert_allclose(as_dict["predictions"], expected, rtol=1e-6)


def test_torch_checkpoint_and_scripted_model(tmp_path):
    model = _linear(3, 4)
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    expected = _torch_out(model, x)
    from_state = TorchPredictor.from_checkpoint(TorchCheckpoint.from_model(model),
                                                model=_linear(3, 4, seed=2))
    out = from_state.predict({"x": x})["predictions"]
    assert out.shape == (5, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-6)

    scripted_dir = tmp_path / "scripted"
    scripted_dir.mkdir()
    torch.jit.save(torch.jit.script(model), str(scripted_dir / "model.pt"))
    scripted = TorchPredictor.from_checkpoint(Checkpoint.from_directory(str(scripted_dir)))
    df = pd.DataFrame({"x": list(x)})
    got = np.stack(scripted.predict(df)["predictions"].to_numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_no_model_and_no_saved_model_says_what_to_pass(tmp_path):
    ckpt = _checkpoint(tmp_path / "c", _linear())
    with pytest.raises(Exception, match="pass model=YourModule"):
        TorchPredictor.from_checkpoint(ckpt)


def test_model_card_feature_columns_are_the_default_in_order(tmp_path):
    model = _linear(2, 1)
    ckpt = _checkpoint(tmp_path / "c", model, card={
        "framework": "torch", "feature_columns": ["b", "a"], "label_column": "y"})
    predictor = TorchPredictor.from_checkpoint(ckpt, model=_linear(2, 1, seed=3))
    df = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "id": [0, 1], "y": [0.0, 1.0]})
    out = predictor.predict(df)["predictions"].to_numpy()
    np.testing.assert_allclose(out, _torch_out(model, df[["b", "a"]].to_numpy())[:, 0],
                               rtol=1e-6)
    with pytest.raises(MissingColumnsError, match=r"\['b'\]") as info:
        predictor.predict(df.drop(columns=["b"]))
    assert info.value.missing == ["b"]


def test_saved_preprocessor_is_applied_before_the_model(tmp_path):
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"a": rng.normal(50, 10, 200), "b": rng.normal(-3, 2, 200)})
    scaler = StandardScaler(["a", "b"]).fit(train)
    model = _linear(2, 1)
    ckpt = _checkpoint(tmp_path / "c", model, preprocessor=scaler,
                       card={"framework": "torch", "feature_columns": ["a", "b"]})
    predictor = TorchPredictor.from_checkpoint(ckpt, model=_linear(2, 1, seed=4))
    assert isinstance(predictor.preprocessor, StandardScaler)
    raw = train.head(10)
    got = predictor.predict(raw)["predictions"].to_numpy()
    scaled = scaler.transform_batch(raw)[["a", "b"]].to_numpy()
    np.testing.assert_allclose(got, _torch_out(model, scaled)[:, 0], rtol=1e-5)
    skipped = _torch_out(model, raw[["a", "b"]].to_numpy())[:, 0]
    assert np.abs(got - skipped).max() > 1.0


def test_custom_preprocessor_may_create_the_feature_columns(tmp_path):
    model = _linear(1, 1)
    ckpt = _checkpoint(tmp_path / "c", model, preprocessor=DoubleA(),
                       card={"framework": "torch", "feature_columns": ["a2"]})
    assert (tmp_path / "c" / "preprocessor.pkl").exists()
    # A custom preprocessor is a pickle: loading it is opted into.
    with pytest.raises(CheckpointError, match="custom preprocessor.*allow_pickle=True"):
        TorchPredictor.from_checkpoint(ckpt, model=_linear(1, 1, seed=8))
    predictor = TorchPredictor.from_checkpoint(ckpt, model=_linear(1, 1, seed=8),
                                               allow_pickle=True)
    df = pd.DataFrame({"a": [1.0, 2.0], "id": [5, 6]})
    np.testing.assert_allclose(predictor.predict(df)["predictions"].to_numpy(),
                               _torch_out(model, np.array([[2.0], [4.0]]))[:, 0], rtol=1e-6)
    # Nothing is required of the input before the custom preprocessor ran (but keeps).
    from engine.predict import required_columns
    assert required_columns(predictor.model_card, DoubleA(), None, ["id"]) == {
        "keep_columns given": ["id"]}


def test_other_framework_checkpoint_names_both_frameworks(tmp_path):
    ckpt = _checkpoint(tmp_path / "c", _linear(), card={
        "framework": "xgboost", "trainer": "XGBoostTrainer"})
    for load in (lambda: TorchPredictor.from_checkpoint(ckpt, model=_linear()),
                 lambda: BatchPredictor.from_checkpoint(ckpt, TorchPredictor,
                                                        model=_linear())):
        with pytest.raises(FrameworkMismatchError) as info:
            load()
        assert "'xgboost'" in str(info.value) and "'torch'" in str(info.value)
        assert (info.value.checkpoint_framework, info.value.predictor_framework) == (
            "xgboost", "torch")
    # A framework-neutral trainer's card (DataParallelTrainer: "generic") loads.
    generic = _checkpoint(tmp_path / "g", _linear(), card={"framework": "generic"})
    TorchPredictor.from_checkpoint(generic, model=_linear())


# --- task inference and metrics -----------------------------------------------------------
def test_infer_task_rules():
    from engine.evaluate import infer_task

    labels = np.array([0, 2, 1, 2])
    assert infer_task(labels, np.zeros((4, 3))) == "classification"       # per-class scores
    assert infer_task(labels, np.array([0, 2, 2, 1])) == "classification"  # labels predicted
    assert infer_task(np.array([0, 1, 1]), np.array([0.2, 0.9, 0.6])) == "classification"
    assert infer_task(np.array([0.5, 1.7]), np.array([0.4, 1.9])) == "regression"
    assert infer_task(np.array([3, 7, 1]), np.array([2.9, 7.2, 0.8])) == "regression"
    assert infer_task(labels, np.zeros((4, 3)), "regression") == "regression"
    with pytest.raises(ConfigError, match="task must be one of"):
        infer_task(labels, labels, "ranking")


def test_classification_metrics_match_scikit_learn_logits_and_probabilities():
    from sklearn import metrics as skm

    from engine.evaluate import classification_metrics

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    logits = rng.normal(size=(300, 3)) + 2.0 * np.eye(3)[y]
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    pred = probs.argmax(axis=1)
    for scores in (logits, probs):  # logits go through softmax; probabilities stay
        m = classification_metrics(y, scores)
        assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
        assert m["f1"] == pytest.approx(skm.f1_score(y, pred, average="macro"))
        assert m["precision"] == pytest.approx(skm.precision_score(y, pred, average="macro"))
        assert m["recall"] == pytest.approx(skm.recall_score(y, pred, average="macro"))
        assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(y, probs, multi_class="ovr"))
        assert m["log_loss"] == pytest.approx(skm.log_loss(y, probs))
        assert m["confusion_matrix"] == skm.confusion_matrix(y, pred).tolist()
        assert m["labels"] == [0, 1, 2]


def test_binary_probability_and_label_only_classifiers():
    from sklearn import metrics as skm

    from engine.evaluate import classification_metrics

    y = np.array([0, 1, 1, 0, 1, 0])
    p = np.array([0.1, 0.8, 0.4, 0.3, 0.9, 0.6])
    m = classification_metrics(y, p)
    assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(y, p))
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, (p >= 0.5).astype(int)))
    labels_only = classification_metrics(y, np.array([0, 1, 0, 0, 1, 1]))
    assert "roc_auc" not in labels_only and "log_loss" not in labels_only
    with pytest.raises(ConfigError, match="roc_auc needs class probabilities"):
        classification_metrics(y, np.array([0, 1, 0, 0, 1, 1]), metrics=["roc_auc"])
    with pytest.raises(ConfigError, match=r"Unknown metric.*'rmse'"):
        classification_metrics(y, p, metrics=["rmse"])


def test_undefined_metric_is_none_with_a_warning():
    from engine.evaluate import classification_metrics

    out = classification_metrics(np.array([1, 1, 1]), np.array([0.2, 0.7, 0.9]))
    assert out["roc_auc"] is None and any("roc_auc" in w for w in out["warnings"])


def test_regression_metrics_and_custom_metric():
    from sklearn import metrics as skm

    from engine.evaluate import regression_metrics

    y = np.array([1.0, 2.0, 3.5, 4.0])
    p = np.array([1.1, 1.8, 3.0, 4.4])

    def max_error(a, b):
        return float(np.max(np.abs(a - b)))

    m = regression_metrics(y, p, metrics=["rmse", "mae", "r2", max_error])
    assert m["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(y, p)))
    assert m["mae"] == pytest.approx(skm.mean_absolute_error(y, p))
    assert m["r2"] == pytest.approx(skm.r2_score(y, p))
    assert m["max_error"] == pytest.approx(0.5)


def test_evaluate_in_process_classification_writes_the_png(tmp_path):
    model = _linear(2, 3, seed=5)
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.normal(size=60), "b": rng.normal(size=60),
                       "label": rng.integers(0, 3, 60)})
    ckpt = _checkpoint(tmp_path / "c", model, card={
        "framework": "torch", "feature_columns": ["a", "b"], "label_column": "label"})
    report = evaluate(ckpt, df, output_dir=str(tmp_path / "eval"), model=_linear(2, 3))
    assert report["task"] == "classification" and report["label_column"] == "label"
    assert report["num_rows"] == 60
    expected = _torch_out(model, df[["a", "b"]].to_numpy()).argmax(axis=1)
    assert report["accuracy"] == pytest.approx((expected == df["label"].to_numpy()).mean())
    for key in ("precision", "recall", "f1", "roc_auc", "log_loss"):
        assert isinstance(report[key], float)
    path = report["confusion_matrix_path"]
    assert path == str(tmp_path / "eval" / "confusion_matrix.png")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert np.sum(report["confusion_matrix"]) == 60


def test_evaluate_regression_and_label_column_errors(tmp_path):
    model = _linear(2, 1, seed=6)
    df = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0],
                       "target": [0.3, -0.2, 1.5, 0.7]})
    ckpt = _checkpoint(tmp_path / "c", model, card={"framework": "torch"})
    report = evaluate(ckpt, df, label_column="target", model=_linear(2, 1))
    assert report["task"] == "regression" and set(report) >= {"rmse", "mae", "r2"}
    assert "confusion_matrix_path" not in report
    pred = _torch_out(model, df[["a", "b"]].to_numpy())[:, 0]  # label excluded from features
    assert report["mae"] == pytest.approx(np.abs(pred - df["target"].to_numpy()).mean(),
                                          rel=1e-5)
    with pytest.raises(ConfigError, match="label_column"):
        evaluate(ckpt, df, model=_linear(2, 1))
    with pytest.raises(MissingColumnsError, match="nope"):
        evaluate(ckpt, df, label_column="nope", model=_linear(2, 1))


@pytest.mark.gpu
def test_use_gpu_scores_on_cuda(tmp_path):
    model = _linear(3, 2)
    predictor = TorchPredictor.from_checkpoint(TorchCheckpoint.from_model(model),
                                               model=_linear(3, 2, seed=7), use_gpu=True)
    assert next(predictor.model.parameters()).is_cuda
    x = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    np.testing.assert_allclose(predictor.predict({"x": x})["predictions"], _torch_out(model, x),
                               rtol=1e-4, atol=1e-5)


def test_use_gpu_without_cuda_says_what_to_do():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(ConfigError, match="use_gpu=False"):
        TorchPredictor(_linear(), use_gpu=True)


def test_a_plain_pickle_dict_checkpoint_loads_only_when_allowed(tmp_path):
    """Checkpoint.from_dict in a process without torch writes a plain pickle: scoring
    it needs allow_pickle=True (it runs code when loaded); from_dict in a torch process
    writes torch.save's format, which loads with weights_only=True by default."""
    model = _linear()
    path = tmp_path / "plain"
    path.mkdir()
    with open(path / constants.DICT_CHECKPOINT_FILE, "wb") as f:
        pickle.dump({"model_weights": model.state_dict()}, f)
    ckpt = Checkpoint.from_directory(str(path))
    with pytest.raises(CheckpointError, match="is a plain pickle.*allow_pickle=True"):
        TorchPredictor.from_checkpoint(ckpt, model=_linear(seed=1))
    loaded = TorchPredictor.from_checkpoint(ckpt, model=_linear(seed=1), allow_pickle=True)
    assert torch.equal(loaded.model.weight, model.weight)
    native = Checkpoint.from_dict({"model_weights": model.state_dict(), "epoch": 3})
    assert TorchPredictor.from_checkpoint(native, model=_linear(seed=1)).model.weight.equal(
        model.weight)
    assert native.to_dict()["epoch"] == 3
