"""HyperOptSearch, BayesOptSearch and TuneBOHB driven directly (no cluster): they learn
from results, keep the space's types, and reject what they cannot model."""

from __future__ import annotations

import sys

import pytest

from engine.exceptions import ConfigError
from engine.tune import (BasicVariantGenerator, Searcher, choice, grid_search, loguniform,
                         qrandint, randint, sample_from, uniform)
from engine.tune.search.bayesopt import BayesOptSearch
from engine.tune.search.bohb import TuneBOHB
from engine.tune.search.hyperopt import HyperOptSearch

SPACE = {"x": uniform(-5, 5), "n": randint(1, 10), "c": choice(["a", "b"]),
         "q": qrandint(0, 20, 5), "lr": loguniform(1e-4, 1e-1), "fixed": {"k": 3}}


def loss(c):
    return (c["x"] - 1.5) ** 2 + (0 if c["c"] == "b" else 3) + abs(c["n"] - 4)


def best_of(searcher, n, space=SPACE, budget=False):
    searcher.set_search_properties("loss", "min", space, n, 0)
    best = float("inf")
    for i in range(n):
        c = searcher.suggest(f"t{i}")
        assert c["fixed"] == {"k": 3} and isinstance(c["n"], int) and 1 <= c["n"] <= 9
        assert c["q"] in (0, 5, 10, 15, 20) and c["c"] in ("a", "b")
        assert 1e-4 <= c["lr"] <= 1e-1
        value = loss(c)
        best = min(best, value)
        if budget:
            searcher.on_trial_result(f"t{i}", {"loss": value, "hyperband_info": {"budget": 1}})
        searcher.on_trial_complete(f"t{i}", {"loss": value})
    return best


def random_best(n):
    gen = BasicVariantGenerator(seed=0)
    gen.set_search_properties("loss", "min", SPACE, n, 0)
    return min(loss(gen.suggest(f"r{i}")) for i in range(n))


def test_hyperopt_tpe_beats_random_search_with_the_same_budget():
    assert best_of(HyperOptSearch(n_initial_points=10, random_state_seed=0), 60) \
        < random_best(60)


def test_bohb_model_beats_random_search_with_the_same_budget():
    assert best_of(TuneBOHB(seed=0), 60, budget=True) < random_best(60)


def test_points_to_evaluate_come_first():
    point = {"x": 1.5, "n": 4, "c": "b", "q": 5, "lr": 0.01}
    for searcher in (HyperOptSearch(points_to_evaluate=[point]),
                     TuneBOHB(points_to_evaluate=[point])):
        searcher.set_search_properties("loss", "min", SPACE, 5, 0)
        first = searcher.suggest("t0")
        assert {k: first[k] for k in point} == pytest.approx(point)


def test_bayesopt_finds_the_maximum_of_a_smooth_function():
    space = {"x": uniform(-5, 5), "y": uniform(-5, 5), "k": 1}
    search = BayesOptSearch(random_search_steps=4, random_state=0)
    search.set_search_properties("score", "max", space, 14, 0)
    best = -float("inf")
    for i in range(14):
        c = search.suggest(f"t{i}")
        if c is None or c == Searcher.FINISHED:
            continue
        score = -((c["x"] - 1.5) ** 2 + (c["y"] + 0.5) ** 2)
        best = max(best, score)
        search.on_trial_complete(f"t{i}", {"score": score})
    assert best > -0.3  # random search's best of 14 is about -1


def test_what_a_searcher_cannot_model_is_a_config_error():
    with pytest.raises(ConfigError, match="grid_search"):
        HyperOptSearch().set_search_properties("l", "min", {"x": grid_search([1, 2])}, 1, 0)
    with pytest.raises(ConfigError, match="sample_from"):
        TuneBOHB().set_search_properties("l", "min", {"x": sample_from(lambda: 1)}, 1, 0)
    with pytest.raises(ConfigError, match="'n'.*tune.uniform"):
        BayesOptSearch().set_search_properties("l", "min", {"n": randint(1, 3)}, 1, 0)
    with pytest.raises(ConfigError, match="metric"):
        HyperOptSearch().set_search_properties(None, None, SPACE, 1, 0)
    with pytest.raises(ConfigError, match="unknown keys"):
        TuneBOHB(bohb_config={"top_n": 10})
    with pytest.raises(ConfigError, match="kind"):
        BayesOptSearch(utility_kwargs={"kind": "xyz"})
    with pytest.raises(TypeError):
        HyperOptSearch(n_startup_jobs=3)  # hyperopt's name, not the searcher's


@pytest.mark.parametrize("cls, module, extra", [
    (HyperOptSearch, "hyperopt", "hyperopt"), (BayesOptSearch, "bayes_opt", "bayesopt"),
    (TuneBOHB, "ConfigSpace", "bohb")])
def test_a_missing_library_names_the_extra(monkeypatch, cls, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ImportError, match=rf"pip install 'trainyard\[{extra}\]'"):
        cls().set_search_properties("loss", "min", {"x": uniform(0, 1)}, 1, 0)
