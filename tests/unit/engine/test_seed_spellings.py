"""Issue 23, gap 11 without Ray: the seed's automatic fields, prepare_model's strategies,
get_devices() and HorovodTrainer(tensorflow_backend=...)."""

from __future__ import annotations

import time

import pytest

from engine import ConfigError
from engine._internal.worker_group.session import TrainContext, TrainSession


def _report(metrics, trial_info=None):
    session = TrainSession(TrainContext(), None, "a", trial_info=trial_info)
    session.report(metrics)
    return session.queue.get_nowait().metrics


def test_seed_fields_with_reported_values_winning():
    out = _report({"loss": 1.0}, {"scheduled_at": time.time() - 5})
    assert out["_training_iteration"] == 1 and out["_timestamp"] == out["timestamp"]
    assert out["timesteps_total"] is None and out["episodes_total"] is None
    assert out["timesteps_since_restore"] == 0 and out["warmup_time"] >= 5
    rl = _report({"timesteps_total": 400, "episodes_total": 7})
    assert rl["timesteps_total"] == 400 and rl["episodes_total"] == 7
    assert rl["warmup_time"] == 0.0  # not scheduled by a controller


def test_prepare_model_strategies_outside_a_group():
    torch = pytest.importorskip("torch")
    from engine.torch import get_devices, prepare_model

    model = torch.nn.Linear(2, 1)
    for strategy in ("ddp", "fsdp", None):  # world size 1: nothing to wrap
        assert prepare_model(model, parallel_strategy=strategy) is model
    with pytest.raises(ValueError, match="'ddp', 'fsdp' or None"):
        prepare_model(model, parallel_strategy="deepspeed")
    assert get_devices() == [torch.device("cpu")]


def test_horovod_tensorflow_backend_spelling():
    pytest.importorskip("horovod")
    from engine.horovod import HorovodConfig, HorovodTrainer

    config = HorovodConfig()
    trainer = HorovodTrainer(lambda: None, tensorflow_backend=config)
    assert trainer.backend_config is config
    with pytest.raises(ConfigError, match="pass one"):
        HorovodTrainer(lambda: None, tensorflow_backend=config, horovod_config=config)
    with pytest.raises(ConfigError, match="tensorflow_backend must be"):
        HorovodTrainer(lambda: None, tensorflow_backend={"timeout_s": 3})
