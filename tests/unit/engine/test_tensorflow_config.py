"""TensorflowConfig / TensorflowTrainer settings, TF_CONFIG, Keras-log selection and the
predictor's loading paths, without a cluster (one real Keras model for the loaders)."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engine import Checkpoint, constants
from engine.exceptions import CheckpointError, ConfigError
from engine.tensorflow import TensorflowConfig, TensorflowTrainer, to_tf
from engine.tensorflow._logs import parse_events, select_metrics, to_python
from engine.tensorflow.config import build_tf_config, format_address


def _noop():
    pass


# --- light import -----------------------------------------------------------------------
def test_importing_engine_tensorflow_imports_no_framework():
    code = ("import sys, engine.tensorflow as t; t.TensorflowTrainer(lambda: None); "
            "print([m for m in ('tensorflow', 'tf_keras', 'keras', 'torch') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# --- config and trainer -----------------------------------------------------------------
def test_worker_env_sets_legacy_keras_and_quiet_logs(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    env = TensorflowTrainer(_noop)._worker_env()
    assert env == {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's own level wins
    env = TensorflowTrainer(_noop, tensorflow_config=TensorflowConfig(legacy_keras=False)
                            )._worker_env()
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "0"}


def test_config_validation_and_argument_names():
    with pytest.raises(ConfigError, match="legacy_keras"):
        TensorflowConfig(legacy_keras="yes")
    cfg = TensorflowConfig()
    assert TensorflowTrainer(_noop, tensorflow_backend=cfg).backend_config is cfg
    with pytest.raises(ConfigError, match="not both"):
        TensorflowTrainer(_noop, tensorflow_config=cfg, tensorflow_backend=cfg)
    with pytest.raises(ConfigError, match="TensorflowConfig, got BackendConfig"):
        from engine._internal.worker_group.backend import BackendConfig

        TensorflowTrainer(_noop, tensorflow_config=BackendConfig())


def test_missing_framework_is_an_import_error_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tf_keras" else real(name, *a))
    with pytest.raises(ImportError, match=r"tf_keras.*pip install 'trainyard\[tensorflow\]'"):
        TensorflowTrainer(_noop)
    TensorflowTrainer(_noop, tensorflow_config=TensorflowConfig(legacy_keras=False))


def test_tf_config_names_every_worker_and_this_task():
    addrs = [format_address("10.0.0.1", 1234), format_address("fe80::1", 99)]
    assert addrs == ["10.0.0.1:1234", "[fe80::1]:99"]
    assert build_tf_config(addrs, 1) == {"cluster": {"worker": addrs},
                                         "task": {"type": "worker", "index": 1}}
    with pytest.raises(ValueError):
        build_tf_config(addrs, 2)


def test_to_tf_batch_size_errors_say_what_to_pass():
    with pytest.raises(ConfigError, match="exactly one"):
        to_tf(object(), "x", "y")
    with pytest.raises(ConfigError, match="exactly one"):
        to_tf(object(), "x", "y", batch_size=4, worker_batch_size=2)
    with pytest.raises(ConfigError, match="≥ 1"):
        to_tf(object(), "x", "y", batch_size=0)
    with pytest.raises(ConfigError, match="get_dataset_shard"):
        to_tf([1, 2], "x", "y", batch_size=2)


# --- Keras logs → metrics -------------------------------------------------------------
def test_select_metrics_names_keys_and_converts_values():
    logs = {"loss": np.float32(0.5), "acc": np.array(0.25), "per_class": np.array([1, 2])}
    assert select_metrics(logs, None) == {"loss": 0.5, "acc": 0.25, "per_class": [1, 2]}
    assert select_metrics(logs, "loss") == {"loss": 0.5}
    assert select_metrics(logs, ["loss", "acc"]) == {"loss": 0.5, "acc": 0.25}
    assert select_metrics(logs, {"train_loss": "loss"}) == {"train_loss": 0.5}
    assert isinstance(select_metrics(logs, "loss")["loss"], float)
    with pytest.raises(KeyError, match=r"\['val_loss'\].*\['acc', 'loss', 'per_class'\]"):
        select_metrics(logs, ["loss", "val_loss"])
    assert to_python("text") == "text"


def test_events_are_checked():
    assert parse_events("epoch_end", "checkpoint_on") == ["epoch_end"]
    assert parse_events([], "checkpoint_on") == []
    with pytest.raises(ValueError, match="unknown event.*'epoch'.*epoch_end"):
        parse_events(["epoch"], "report_metrics_on")


# --- checkpoints and the predictor (real Keras 2, in this process) ----------------------
@pytest.fixture(scope="module")
def tf_keras():
    pytest.importorskip("tensorflow", reason="needs trainyard[tensorflow]")
    return pytest.importorskip("tf_keras", reason="needs trainyard[tensorflow]")


def _model(tf_keras, seed=0):
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3, input_shape=(4,)),
                                 tf_keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


def test_keras_file_checkpoint_round_trips_and_predicts(tf_keras, tmp_path):
    from engine.tensorflow import TensorflowCheckpoint, TensorflowPredictor

    model = _model(tf_keras)
    x = np.arange(12, dtype=np.int64).reshape(3, 4)  # ints are cast to the input dtype
    expected = model(x.astype("float32")).numpy()
    for name in ("model.keras", "model.h5"):
        ckpt = TensorflowCheckpoint.from_model(model, filename=name)
        loaded = ckpt.get_model()
        assert [w.tolist() for w in loaded.get_weights()] == \
               [w.tolist() for w in model.get_weights()]
        predictor = TensorflowPredictor.from_checkpoint(ckpt)
        out = predictor.predict(pd.DataFrame({"f": list(x)}))
        np.testing.assert_allclose(np.stack(out["predictions"]), expected, rtol=1e-6)
        # Weights into a given model (e.g. one with custom layers).
        into = TensorflowCheckpoint.wrap(ckpt).get_model(model=lambda: _model(tf_keras, 1))
        np.testing.assert_allclose(into(x.astype("float32")).numpy(), expected, rtol=1e-6)
    with pytest.raises(ConfigError, match="must be a plain file name ending"):
        TensorflowCheckpoint.from_model(model, filename="model.pkl")


def test_dict_checkpoint_needs_a_model_and_matching_weights(tf_keras, tmp_path):
    from engine.tensorflow import TensorflowPredictor

    model = _model(tf_keras)
    path = tmp_path / "ckpt"
    path.mkdir()
    with open(path / constants.DICT_CHECKPOINT_FILE, "wb") as f:
        pickle.dump({"epoch": 3, "model_weights": model.get_weights()}, f)
    (path / constants.MODEL_CARD_FILE).write_text(json.dumps({"framework": "tensorflow"}))
    ckpt = Checkpoint.from_directory(str(path))

    with pytest.raises(ConfigError, match="holds weights only.*model=build_model"):
        TensorflowPredictor.from_checkpoint(ckpt)
    # model_definition: the older name of model=.
    predictor = TensorflowPredictor.from_checkpoint(
        ckpt, model_definition=lambda: _model(tf_keras, seed=5))
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(np.stack(predictor.predict({"f": x})["predictions"]),
                               model(x).numpy(), rtol=1e-6)
    wrong = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
    with pytest.raises(CheckpointError, match="do not fit the model given"):
        TensorflowPredictor.from_checkpoint(ckpt, model=wrong)


def test_checkpoint_without_a_model_says_how_to_save_one(tf_keras, tmp_path):
    from engine.tensorflow import TensorflowCheckpoint, TensorflowPredictor

    (tmp_path / "notes.txt").write_text("nothing here")
    ckpt = Checkpoint.from_directory(str(tmp_path))
    with pytest.raises(CheckpointError, match="TensorflowCheckpoint.from_model"):
        TensorflowPredictor.from_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="no file 'x.keras'"):
        TensorflowCheckpoint.wrap(ckpt).get_model(model_file="x.keras")


def test_callback_asks_keras_for_batch_hooks_only_when_it_reports_on_batches(tf_keras):
    # In a fresh process with the workers' setting, so tf.keras is Keras 2 as there.
    code = (
        "from engine.tensorflow import ReportCheckpointCallback as C; import tf_keras; "
        "assert issubclass(C, tf_keras.callbacks.Callback); "
        "print(C()._implements_train_batch_hooks(), C()._implements_test_batch_hooks(), "
        "C(report_metrics_on='train_batch_end')._implements_train_batch_hooks(), "
        "C(checkpoint_on=['test_batch_end'])._implements_test_batch_hooks()); "
        "from engine.exceptions import ConfigError\n"
        "try: C(filename='../model.keras')\n"
        "except ConfigError as e: print('rejected')")
    env = dict(__import__("os").environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False", "True", "True", "rejected"]


def test_a_process_without_tensorflow_2_behaviour_gets_advice(tf_keras, tmp_path):
    """After tf.compat.v1.disable_v2_behavior() (which RLlib's first import calls), a
    Keras checkpoint cannot load: the error says why and what to do, rather than Keras's
    "Unknown object: 'Sequential'"."""
    from engine.tensorflow import TensorflowCheckpoint

    model_dir = tmp_path / "ckpt"
    TensorflowCheckpoint.from_model(_model(tf_keras)).to_directory(str(model_dir))
    code = f"""
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
from engine import Checkpoint
from engine.exceptions import ConfigError
from engine.tensorflow import TensorflowPredictor
try:
    TensorflowPredictor.from_checkpoint(Checkpoint.from_directory({str(model_dir)!r}))
except ConfigError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "TF_USE_LEGACY_KERAS": "1"})
    assert "enable_v2_behavior()" in out.stdout, out.stderr[-3000:]
