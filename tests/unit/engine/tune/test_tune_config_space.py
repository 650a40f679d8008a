"""Search spaces inside config objects of a param_space (Ray Tune's
``ScalingConfig(num_workers=tune.grid_search([1, 2]))``), without a cluster."""

from __future__ import annotations

import pytest

from engine import DataConfig, ScalingConfig
from engine.exceptions import ConfigError
from engine.trainer import DataParallelTrainer
from engine.tune import BasicVariantGenerator, choice, grid_search
from engine.tune._config_space import expand, rebuild
from engine.tune._trainable import make_trainable


def trials(space, num_samples=1):
    opened, classes = expand(space)
    gen = BasicVariantGenerator(seed=0)
    gen.set_search_properties(None, None, opened, num_samples, 0)
    out = []
    while (config := gen.suggest("t")) is not None:
        out.append(rebuild(config, classes))
    return out


def test_a_grid_in_a_scaling_config_expands_into_one_trial_per_value():
    space = {"scaling_config": ScalingConfig(num_workers=grid_search([1, 2]),
                                             resources_per_worker={"CPU": choice([1, 2])}),
             "train_loop_config": {"lr": grid_search([0.1, 0.2])}}
    configs = trials(space)
    assert len(configs) == 4
    assert sorted((c["scaling_config"].num_workers, c["train_loop_config"]["lr"])
                  for c in configs) == [(1, 0.1), (1, 0.2), (2, 0.1), (2, 0.2)]
    for c in configs:
        sc = c["scaling_config"]
        assert isinstance(sc, ScalingConfig) and sc.resources_per_worker["CPU"] in (1, 2)
        assert sc.placement_strategy == "PACK"  # the other fields as constructed


def test_a_resolved_value_is_validated_like_any_other():
    space = {"scaling_config": ScalingConfig(num_workers=grid_search([2, 0]))}
    opened, classes = expand(space)
    with pytest.raises(ConfigError, match="num_workers"):
        rebuild({"scaling_config": dict(opened["scaling_config"], num_workers=0)}, classes)
    assert expand({"data": DataConfig(datasets_to_split=choice([["a"], "all"]))})[1] == {
        ("data",): DataConfig}


def test_a_trainer_applies_the_trials_scaling_config():
    trainer = DataParallelTrainer(lambda c: None, scaling_config=ScalingConfig(num_workers=3))
    config = trials({"scaling_config": ScalingConfig(num_workers=grid_search([1, 2]))})[1]
    trainable = make_trainable(trainer)
    assert trainable._configured(config).scaling_config.num_workers == 2


def test_a_search_space_where_nothing_resolves_it_is_a_clear_error(tmp_path):
    trainer = DataParallelTrainer(lambda c: None,
                                  scaling_config=ScalingConfig(num_workers=grid_search([1, 2])))
    with pytest.raises(ConfigError, match=r"num_workers=.*param_space"):
        trainer.fit()
    with pytest.raises(ConfigError, match="param_space"):
        DataParallelTrainer(lambda c: None,
                            dataset_config=DataConfig(datasets_to_split=choice(["all"]))).fit()
    # Without a marker, a bad value is still refused at construction.
    with pytest.raises(ConfigError, match="num_workers"):
        ScalingConfig(num_workers=0)
