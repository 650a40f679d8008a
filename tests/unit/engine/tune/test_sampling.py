"""Ray Tune's sampling helpers: ranges, quantisation, log scale, sample_from."""

from __future__ import annotations

import random
import statistics

import pytest

from engine import ConfigError
from engine import tune
from engine.tune.search import BasicVariantGenerator, resolve


def draw(domain, n=400, seed=0):
    rng = random.Random(seed)
    return [domain.sample(rng) for _ in range(n)]


def test_qrandint_includes_upper_and_rounds_to_q():
    values = draw(tune.qrandint(0, 10, 5))
    assert set(values) == {0, 5, 10}
    assert all(isinstance(v, int) for v in values)


def test_lograndint_excludes_upper_and_favours_small_values():
    values = draw(tune.lograndint(1, 1000))
    assert min(values) >= 1 and max(values) < 1000
    assert statistics.median(values) < 100  # uniform would give ~500
    assert set(draw(tune.qlograndint(1, 100, 10))) <= set(range(0, 101, 10))


def test_qloguniform_and_qrandn():
    values = draw(tune.qloguniform(1e-3, 1.0, 1e-3))
    assert all(1e-3 <= v <= 1.0 and abs(v * 1000 - round(v * 1000)) < 1e-6 for v in values)
    normal = draw(tune.randn(5.0, 2.0), n=2000)
    assert 4.8 < statistics.mean(normal) < 5.2 and 1.8 < statistics.stdev(normal) < 2.2
    assert all(v % 0.5 == 0 for v in draw(tune.qrandn(0, 1, 0.5)))


def test_sample_from_sees_the_other_values():
    space = {"a": tune.uniform(1, 2), "nested": {"b": tune.sample_from(
        lambda spec: spec.config.a * 10)}, "c": tune.sample_from(lambda: 7)}
    config = resolve(space, {}, random.Random(1))
    assert config["nested"]["b"] == pytest.approx(config["a"] * 10)
    assert config["c"] == 7


def test_sample_from_in_the_default_searcher_with_a_grid():
    gen = BasicVariantGenerator(seed=0)
    gen.set_search_properties(None, None, {"x": tune.grid_search([1, 2]),
                                           "y": tune.sample_from(lambda s: s.config.x + 1)},
                              1, None)
    assert [gen.suggest(str(i))["y"] for i in range(2)] == [2, 3]


@pytest.mark.parametrize("make", [lambda: tune.randn(0, 0), lambda: tune.qrandint(0, 5, 0),
                                  lambda: tune.lograndint(0, 10),
                                  lambda: tune.sample_from(3)])
def test_bad_ranges_are_clear_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_optuna_rejects_what_it_cannot_search():
    pytest.importorskip("optuna")
    searcher = tune.OptunaSearch(metric="m", mode="min")
    with pytest.raises(ConfigError, match="cannot search randn"):
        searcher.set_search_properties(None, None, {"x": tune.randn()}, 1, 0)
