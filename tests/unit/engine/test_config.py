import math

import pytest

from engine import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
from engine.config import score_is_better
from engine.exceptions import ConfigError


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True])
def test_num_workers_must_be_positive_int(n):
    with pytest.raises(ConfigError, match="num_workers"):
        ScalingConfig(num_workers=n)


def test_gpu_resources_without_use_gpu_says_how_to_fix():
    with pytest.raises(ConfigError, match="use_gpu=True"):
        ScalingConfig(num_workers=2, resources_per_worker={"GPU": 1})


def test_unknown_placement_strategy():
    with pytest.raises(ConfigError, match="PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"):
        ScalingConfig(placement_strategy="RANDOM")


def test_placement_strategy_is_case_insensitive():
    assert ScalingConfig(placement_strategy="spread").placement_strategy == "SPREAD"


def test_worker_resources_defaults():
    assert ScalingConfig(num_workers=2).worker_resources == {"CPU": 1.0}
    assert ScalingConfig(use_gpu=True).worker_resources == {"CPU": 1.0, "GPU": 1.0}
    cfg = ScalingConfig(num_workers=3, resources_per_worker={"CPU": 2})
    assert cfg.total_resources == {"CPU": 6.0}


def test_negative_resource_rejected():
    with pytest.raises(ConfigError, match=">= 0"):
        ScalingConfig(resources_per_worker={"CPU": -1})


def test_unknown_score_order():
    with pytest.raises(ConfigError, match="'max' or 'min'"):
        CheckpointConfig(checkpoint_score_order="highest")


def test_num_to_keep_negative():
    with pytest.raises(ConfigError, match="num_to_keep"):
        CheckpointConfig(num_to_keep=-2)


def test_failure_config():
    assert FailureConfig(max_failures=-1).allows_retry(10**6)
    assert not FailureConfig(max_failures=0).allows_retry(0)
    assert FailureConfig(max_failures=2).allows_retry(1)
    assert not FailureConfig(max_failures=2).allows_retry(2)
    with pytest.raises(ConfigError):
        FailureConfig(max_failures=-2)


def test_run_config_defaults_and_name_validation():
    rc = RunConfig()
    assert rc.checkpoint_config == CheckpointConfig()
    assert rc.failure_config == FailureConfig()
    with pytest.raises(ConfigError, match="without '/'"):
        RunConfig(name="a/b")


def test_data_config():
    assert DataConfig().should_split("validation")
    cfg = DataConfig(datasets_to_split=["train"])
    assert cfg.should_split("train") and not cfg.should_split("validation")
    with pytest.raises(ConfigError):
        DataConfig(datasets_to_split="train")


def test_nan_ranks_worst():
    assert score_is_better(1.0, math.nan, "max")
    assert score_is_better(1.0, math.nan, "min")
    assert not score_is_better(math.nan, 1.0, "min")


def test_run_config_repr_hides_credentials():
    rc = RunConfig(storage_path="s3://key:topsecret@bucket/p?endpoint_override=h:1")
    assert "topsecret" not in repr(rc) and "s3://bucket/p" in repr(rc)


def test_run_config_accepts_pathlib(tmp_path):
    assert RunConfig(storage_path=tmp_path).storage_path == str(tmp_path)


def test_run_config_checks_callbacks_by_their_hooks():
    from engine.callbacks import LoggerCallback

    class OnlyReports:  # not a Callback subclass: the runner calls the hooks it has
        def on_report(self, metrics, all_metrics):
            pass

    mine, logger_cb = OnlyReports(), LoggerCallback()
    assert RunConfig(callbacks=[mine, logger_cb]).callbacks == [mine, logger_cb]
    with pytest.raises(ConfigError, match=r"callbacks=\[\.\.\., 42\].*engine.callbacks"):
        RunConfig(callbacks=[42])
