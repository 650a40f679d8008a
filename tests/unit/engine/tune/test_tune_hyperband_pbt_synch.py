"""HyperBand's bracket math and halving, synchronous PBT's barrier, and the searcher
wrappers (Repeater, ConcurrencyLimiter), without a cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.exceptions import ConfigError
from engine.tune import (ConcurrencyLimiter, HyperBandForBOHB, HyperBandScheduler,
                         PopulationBasedTraining, Repeater, Searcher)
from engine.tune.schedulers import Exploit

C, P, S = "CONTINUE", "PAUSE", "STOP"


def trial(tid, config=None, checkpoint=None):
    return SimpleNamespace(trial_id=tid, config=config or {}, checkpoint=checkpoint,
                           trial_name=tid)


def hyperband(**kw):
    hb = HyperBandScheduler(**kw)
    hb.set_search_properties("score", "max")
    return hb


def add(sched, n, start=0):
    trials = [trial(f"t{i}") for i in range(start, start + n)]
    for t in trials:
        sched.on_trial_add(t)
    return trials


def test_bracket_sizes_and_milestones_follow_ray_tune():
    hb = hyperband(max_t=81, reduction_factor=3)
    assert hb.s_max_1 == 5
    assert [(hb.n0(s), hb.r0(s)) for s in range(5)] == [
        (5, 81), (8, 27), (15, 9), (34, 3), (81, 1)]
    add(hb, 5 + 8 + 1)
    sizes = [(b.max_trials, b.added, b.r) for b in hb.bands[0]]
    assert sizes == [(5, 5, 81), (8, 8, 27), (15, 1, 9)]


def test_a_full_bracket_halves_when_every_trial_reached_the_milestone():
    hb = hyperband(max_t=9, reduction_factor=3)
    first = add(hb, 3)  # bracket s=0: three trials straight to max_t
    second = add(hb, 5, start=3)  # bracket s=1: five trials, milestone 3
    for i, t in enumerate(second[:4]):
        assert hb.on_trial_result(t, {"training_iteration": 1, "score": i}) == C
        assert hb.on_trial_result(t, {"training_iteration": 3, "score": i}) == P
    assert hb.pop_paused_decisions() == {}
    # The last one reaches the milestone: ceil(5 / 3) = 2 go on (scores 3 and 10).
    assert hb.on_trial_result(second[4], {"training_iteration": 3, "score": 10}) == C
    decisions = hb.pop_paused_decisions()
    assert decisions == {"t3": S, "t4": S, "t5": S, "t6": C}
    assert hb.bands[0][1].r == 9 and hb.num_stopped == 3
    # At max_t the bracket's trials pause until both arrived, then all stop.
    assert hb.on_trial_result(second[3], {"training_iteration": 9, "score": 3}) == P
    assert hb.on_trial_result(second[4], {"training_iteration": 9, "score": 9}) == S
    assert hb.pop_paused_decisions() == {"t6": S}
    # Bracket s=0 is untouched by the other bracket.
    assert hb.on_trial_result(first[0], {"training_iteration": 5, "score": 0}) == C


def test_a_bracket_that_cannot_fill_halves_when_released():
    hb = hyperband(max_t=9, reduction_factor=3)
    add(hb, 3)
    second = add(hb, 2, start=3)  # bracket s=1 wants 5 trials; the search ends at 2
    assert hb.on_trial_result(second[0], {"training_iteration": 3, "score": 1}) == P
    assert hb.on_trial_result(second[1], {"training_iteration": 3, "score": 2}) == P
    hb.release_waiting()
    # Ray Tune keeps ceil(n0 / eta) = 2 of the bracket's planned 5: both go on.
    assert hb.pop_paused_decisions() == {"t3": C, "t4": C}
    assert hb.bands[0][1].r == 9


def test_a_trial_that_ends_lets_its_bracket_halve():
    hb = hyperband(max_t=9, reduction_factor=3)
    add(hb, 3)
    second = add(hb, 5, start=3)
    for i, t in enumerate(second[:4]):
        assert hb.on_trial_result(t, {"training_iteration": 3, "score": i}) == P
    hb.on_trial_complete(second[4], {"training_iteration": 2, "score": 99})  # failed early
    assert hb.pop_paused_decisions() == {"t3": S, "t4": S, "t5": C, "t6": C}


def test_hyperband_for_bohb_tells_the_budget_and_bad_arguments_are_errors():
    hb = HyperBandForBOHB(max_t=9, reduction_factor=3)
    hb.set_search_properties("score", "max")
    t = add(hb, 1)[0]
    result = {"training_iteration": 9, "score": 1}
    hb.on_trial_result(t, result)
    assert result["hyperband_info"] == {"budget": 9}
    with pytest.raises(ConfigError, match="reduction_factor"):
        HyperBandScheduler(reduction_factor=1)
    with pytest.raises(TypeError):
        HyperBandScheduler(grace_period=3)  # an ASHA argument: not HyperBand's
    with pytest.raises(ConfigError, match="metric"):
        HyperBandScheduler().set_search_properties(None, None)


def synch_pbt(**kw):
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": [0.1, 0.2, 0.3]},
                                  quantile_fraction=0.25, synch=True, seed=0, **kw)
    pbt.set_search_properties("score", "max")
    trials = [trial(f"t{i}", {"lr": 0.1 * (i % 3 + 1)}, checkpoint=f"ckpt{i}")
              for i in range(4)]
    for t in trials:
        pbt.on_trial_add(t)
    return pbt, trials


def test_synch_pbt_waits_for_every_trial_then_exploits_the_bottom_quantile():
    pbt, trials = synch_pbt()
    for i, t in enumerate(trials[:3]):
        assert pbt.on_trial_result(t, {"training_iteration": 1, "score": i}) == C
        assert pbt.on_trial_result(t, {"training_iteration": 2, "score": i}) == P
    assert pbt.pop_paused_decisions() == {}  # t3 has not reached the barrier
    # The last trial arrives: the worst (t0) exploits the best (t3); all go on.
    assert pbt.on_trial_result(trials[3], {"training_iteration": 2, "score": 10}) == C
    decisions = pbt.pop_paused_decisions()
    assert decisions["t1"] == C and decisions["t2"] == C
    exploit = decisions["t0"]
    assert isinstance(exploit, Exploit) and exploit.donor is trials[3]
    assert exploit.checkpoint == "ckpt3"
    # The next barrier is at 4.
    assert pbt.on_trial_result(trials[0], {"training_iteration": 3, "score": 0}) == C
    assert pbt.on_trial_result(trials[0], {"training_iteration": 4, "score": 0}) == P


def test_synch_pbt_barrier_goes_on_without_a_finished_trial():
    pbt, trials = synch_pbt()
    for i, t in enumerate(trials[:3]):
        assert pbt.on_trial_result(t, {"training_iteration": 2, "score": i}) == P
    pbt.on_trial_complete(trials[3], {"training_iteration": 1, "score": 5})
    decisions = pbt.pop_paused_decisions()
    assert set(decisions) == {"t0", "t1", "t2"}
    assert isinstance(decisions["t0"], Exploit) and decisions["t0"].donor is trials[2]


def test_pbt_requires_the_metric_unless_told_not_to():
    pbt, trials = synch_pbt()
    with pytest.raises(ConfigError, match="require_attrs"):
        pbt.on_trial_result(trials[0], {"training_iteration": 1})
    lax, trials = synch_pbt(require_attrs=False)
    assert lax.on_trial_result(trials[0], {"training_iteration": 1}) == C


class Recording(Searcher):
    def __init__(self):
        self.completed, self.n = [], 0

    def suggest(self, trial_id):
        self.n += 1
        return {"x": self.n}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result, error))


def test_repeater_runs_each_config_n_times_and_reports_the_mean():
    inner = Recording()
    inner.metric = "loss"
    rep = Repeater(inner, repeat=3)
    configs = [rep.suggest(f"t{i}") for i in range(6)]
    assert [c["x"] for c in configs] == [1, 1, 1, 2, 2, 2]
    assert [c["__trial_index__"] for c in configs] == [0, 1, 2, 0, 1, 2]
    rep.on_trial_complete("t0", {"loss": 1.0})
    rep.on_trial_complete("t1", {"loss": 2.0})
    assert inner.completed == []  # not before every repeat ended
    rep.on_trial_complete("t2", {"loss": 6.0})
    assert inner.completed == [("t0", {"loss": 3.0}, False)]
    rep.on_trial_complete("t3", None, error=True)  # a failed repeat is left out
    rep.on_trial_complete("t4", {"loss": 4.0})
    rep.on_trial_complete("t5", {"loss": 8.0})
    assert inner.completed[-1] == ("t3", {"loss": 6.0}, False)
    with pytest.raises(ConfigError, match="repeat"):
        Repeater(inner, repeat=0)


def test_concurrency_limiter_holds_back_suggestions_at_the_limit():
    inner = Recording()
    lim = ConcurrencyLimiter(inner, max_concurrent=2)
    assert lim.suggest("a") == {"x": 1} and lim.suggest("b") == {"x": 2}
    assert lim.suggest("c") is None and inner.n == 2  # "not now", inner not asked
    lim.on_trial_complete("a", {"loss": 1})
    assert lim.suggest("c") == {"x": 3}
    batch = ConcurrencyLimiter(Recording(), max_concurrent=2, batch=True)
    batch.suggest("a"), batch.suggest("b")
    batch.on_trial_complete("a", {"loss": 1})
    assert batch.suggest("c") is None and batch.searcher.completed == []
    batch.on_trial_complete("b", {"loss": 2})
    assert [c[0] for c in batch.searcher.completed] == ["a", "b"]
    assert batch.suggest("c") == {"x": 3}
    with pytest.raises(ConfigError, match="max_concurrent"):
        ConcurrencyLimiter(inner, max_concurrent=0)
