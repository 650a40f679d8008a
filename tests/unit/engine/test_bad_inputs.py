"""Bad input caught before anything starts: every config field with a wrong type or
value, train functions that cannot be called or shipped, a param_space of the wrong
shape. Each error must say what to do instead (RELIABILITY.md lists them)."""

from __future__ import annotations

import re
import threading

import pytest

from engine import (CheckpointConfig, ConfigError, DataConfig, FailureConfig, RunConfig,
                    ScalingConfig)
from engine.callbacks import Callback
from engine.torch import TorchConfig, TorchTrainer
from engine.tune import TuneConfig, Tuner

BAD_CONFIGS = [
    # (constructor, kwargs, words the error must contain)
    (ScalingConfig, {"num_workers": "2"}, "integer >= 1"),
    (ScalingConfig, {"num_workers": 0}, "integer >= 1"),
    (ScalingConfig, {"num_workers": True}, "integer >= 1"),
    (ScalingConfig, {"use_gpu": "yes"}, "True or False"),
    (ScalingConfig, {"resources_per_worker": [1]}, "dict like {'CPU': 1}"),
    (ScalingConfig, {"resources_per_worker": {"CPU": -1}}, "numbers >= 0"),
    (ScalingConfig, {"resources_per_worker": {"GPU": 1}}, "set use_gpu=True"),
    (ScalingConfig, {"trainer_resources": "x"}, "dict like {'CPU': 1}"),
    (ScalingConfig, {"placement_strategy": "NEAR"}, "PACK, SPREAD"),
    (RunConfig, {"name": 3}, "non-empty name"),
    (RunConfig, {"name": "a/b"}, "without '/'"),
    (RunConfig, {"storage_path": 3}, "absolute local path or a URI"),
    (RunConfig, {"verbose": 5}, "0 (silent), 1"),
    (RunConfig, {"verbose": "1"}, "0 (silent), 1"),
    (RunConfig, {"callbacks": Callback()}, "pass a list"),
    (RunConfig, {"callbacks": [Callback]}, "pass an instance, Callback()"),
    (RunConfig, {"callbacks": [print]}, "engine.callbacks.Callback"),
    (RunConfig, {"checkpoint_config": {"num_to_keep": 1}}, "CheckpointConfig(**your_dict)"),
    (RunConfig, {"failure_config": 3}, "pass a FailureConfig"),
    (RunConfig, {"metrics_reduce": {"loss": "median"}}, "mean, sum, min, max"),
    (RunConfig, {"metrics_reduce": ["loss"]}, "mean, sum, min, max"),
    (CheckpointConfig, {"num_to_keep": -1}, "None (keep all), 0"),
    (CheckpointConfig, {"num_to_keep": "2"}, "None (keep all), 0"),
    (CheckpointConfig, {"checkpoint_score_attribute": 3}, "name a reported metric"),
    (CheckpointConfig, {"checkpoint_score_order": "best"}, "'max' or 'min'"),
    (FailureConfig, {"max_failures": "1"}, "-1 (retry forever)"),
    (FailureConfig, {"max_failures": -2}, "-1 (retry forever)"),
    (FailureConfig, {"max_failures": 1.5}, "-1 (retry forever)"),
    (DataConfig, {"datasets_to_split": "train"}, "'all' or a list"),
    (DataConfig, {"datasets_to_split": 3}, "'all' or a list"),
    (DataConfig, {"datasets_to_split": [1]}, "'all' or a list"),
    (TorchConfig, {"backend": "mpi"}, "'gloo' or 'nccl'"),
    (TorchConfig, {"init_method": "file"}, "'tcp' or 'env'"),
    (TorchConfig, {"timeout_s": 0}, "must be > 0"),
    (TorchConfig, {"rendezvous_timeout_s": 0}, "None for the default"),
    (TuneConfig, {"mode": "best"}, "'min' or 'max'"),
    (TuneConfig, {"num_samples": 0}, "integer >= 1"),
]


@pytest.mark.parametrize("cls,kwargs,words", BAD_CONFIGS,
                         # Without the object's address: the ids must be the same in
                         # every xdist worker's collection.
                         ids=[re.sub(r" at 0x[0-9a-f]+",
                                     "", f"{c.__name__}-{next(iter(k))}={k[next(iter(k))]!r}")
                              for c, k, _ in BAD_CONFIGS])
def test_wrong_config_field_is_a_config_error_that_says_what_to_use(cls, kwargs, words):
    with pytest.raises(ConfigError) as info:
        cls(**kwargs)
    assert words in str(info.value)


def _train(config):
    pass


@pytest.mark.parametrize("kwargs,words", [
    ({"scaling_config": {"num_workers": 2}}, "ScalingConfig(**your_dict)"),
    ({"run_config": {"name": "x"}}, "RunConfig(**your_dict)"),
    ({"dataset_config": "all"}, "engine.DataConfig"),
    ({"datasets": [1, 2]}, "dict of name -> dataset"),
    ({"train_loop_config": [1]}, "must be a dict"),
    ({"resume_from_checkpoint": "/tmp/ckpt"}, "engine.Checkpoint"),
])
def test_wrong_trainer_argument(kwargs, words):
    with pytest.raises(ConfigError) as info:
        TorchTrainer(_train, **kwargs)
    assert words in str(info.value)


def test_train_func_with_the_wrong_signature():
    def two_args(config, extra):
        pass

    with pytest.raises(ConfigError, match=r"takes \(config, extra\): it must take no "
                                          r"argument or one \(config\)"):
        TorchTrainer(two_args)
    with pytest.raises(ConfigError, match="must be a function"):
        TorchTrainer("train.py")
    # Defaults and *args are fine: the engine passes config, or nothing.
    TorchTrainer(lambda config=None, *rest, **kw: None)


def test_unpicklable_train_func_names_the_captured_object():
    lock = threading.Lock()

    def train_func(config):
        with lock:
            pass

    with pytest.raises(ConfigError) as info:
        TorchTrainer(train_func)
    text = str(info.value)
    assert "'train_func' cannot be pickled" in text
    assert "it captures `lock` (a _thread.lock)" in text
    assert "Create such objects inside the function" in text


def test_param_space_must_be_a_dict():
    with pytest.raises(ConfigError, match="param_space must be a dict"):
        Tuner(TorchTrainer(_train), param_space=[0.1])
