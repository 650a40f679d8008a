"""Search spaces, searchers, schedulers and ResultGrid without a cluster."""

from __future__ import annotations

import math
import os
import random
import statistics
from types import SimpleNamespace

import pytest

from engine import Result
from engine.exceptions import ConfigError
from engine.tune import (ASHAScheduler, BasicVariantGenerator, MedianStoppingRule,
                         OptunaSearch, PopulationBasedTraining, ResultGrid, TuneConfig,
                         choice, grid_search, loguniform, quniform, randint, uniform)
from engine.tune.schedulers import Exploit, TrialScheduler


def variants(space, num_samples=1, seed=None, searcher=None):
    searcher = searcher or BasicVariantGenerator()
    searcher.set_search_properties(None, None, space, num_samples, seed)
    out = []
    while True:
        config = searcher.suggest(f"t{len(out)}")
        if config is None:
            return out
        out.append(config)


# --- search spaces -----------------------------------------------------------------------
def test_grid_times_num_samples_in_seed_order():
    space = {"train_loop_config": {"num_epochs": 2, "input": grid_search([1, 2, 3])}}
    configs = variants(space, num_samples=5)
    assert len(configs) == 15
    assert [c["train_loop_config"]["input"] for c in configs] == [1, 2, 3] * 5
    assert all(c["train_loop_config"]["num_epochs"] == 2 for c in configs)


def test_grids_combine_and_nested_values_resolve():
    space = {"a": grid_search([1, 2]), "nested": {"b": grid_search(["x", "y"]),
                                                  "c": uniform(0, 1), "k": [1, 2]}}
    configs = variants(space, seed=0)
    assert sorted((c["a"], c["nested"]["b"]) for c in configs) == [
        (1, "x"), (1, "y"), (2, "x"), (2, "y")]
    assert all(0 <= c["nested"]["c"] < 1 and c["nested"]["k"] == [1, 2] for c in configs)
    assert len({c["nested"]["c"] for c in configs}) == 4  # sampled afresh per variant


def test_domains_sample_inside_their_ranges():
    rng = random.Random(0)
    for _ in range(500):
        assert 2 <= uniform(2, 3).sample(rng) <= 3
        q = quniform(0, 1, 0.25).sample(rng)
        assert q in (0.0, 0.25, 0.5, 0.75, 1.0)
        lg = loguniform(1e-4, 1e-1).sample(rng)
        assert 1e-4 <= lg <= 1e-1
        assert randint(3, 6).sample(rng) in (3, 4, 5)  # upper excluded
        assert choice(["a", "b"]).sample(rng) in ("a", "b")
    logs = [math.log10(loguniform(1e-4, 1).sample(rng)) for _ in range(2000)]
    assert abs(statistics.fmean(logs) + 2) < 0.15  # uniform in log space


def test_seed_makes_configs_reproducible():
    space = {"lr": loguniform(1e-4, 1e-1), "bs": choice([16, 32, 64]), "n": randint(1, 100)}
    assert variants(space, num_samples=10, seed=7) == variants(space, num_samples=10, seed=7)
    assert variants(space, num_samples=10, seed=7) != variants(space, num_samples=10, seed=8)


@pytest.mark.parametrize("bad", [lambda: uniform(1, 1), lambda: loguniform(0, 1),
                                 lambda: randint(3, 3), lambda: choice([]),
                                 lambda: grid_search([]), lambda: quniform(0, 1, 0)])
def test_invalid_domains_are_config_errors(bad):
    with pytest.raises(ConfigError):
        bad()


def test_tune_config_validation():
    with pytest.raises(ConfigError, match="mode"):
        TuneConfig(metric="x", mode="best")
    with pytest.raises(ConfigError, match="num_samples"):
        TuneConfig(num_samples=0)
    with pytest.raises(ConfigError, match="max_concurrent_trials"):
        TuneConfig(max_concurrent_trials=0)
    with pytest.raises(ConfigError, match="together"):
        TuneConfig(metric="x")


# --- schedulers --------------------------------------------------------------------------
def trial(tid, config=None, checkpoint=None):
    return SimpleNamespace(trial_id=tid, trial_name=tid, config=config or {},
                           checkpoint=checkpoint, status="RUNNING", last_result={})


def test_asha_stops_below_the_rung_cutoff_and_at_max_t():
    asha = ASHAScheduler(metric="acc", mode="max", max_t=9, grace_period=1,
                         reduction_factor=3)
    asha.set_search_properties(None, None)
    assert asha.rungs == [1, 3, 9]
    good, mid, bad = trial("good"), trial("mid"), trial("bad")
    for t in (good, mid, bad):
        asha.on_trial_add(t)
    # The first trial at a rung has nothing to compare with.
    assert asha.on_trial_result(good, {"training_iteration": 1, "acc": 0.9}) == "CONTINUE"
    assert asha.on_trial_result(mid, {"training_iteration": 1, "acc": 0.5}) == "STOP"
    assert asha.on_trial_result(bad, {"training_iteration": 1, "acc": 0.1}) == "STOP"
    assert asha.on_trial_result(good, {"training_iteration": 2, "acc": 0.9}) == "CONTINUE"
    assert asha.on_trial_result(good, {"training_iteration": 9, "acc": 0.9}) == "STOP"


def test_asha_min_mode_and_a_better_late_trial_continues():
    asha = ASHAScheduler(max_t=100, grace_period=2, reduction_factor=2)
    asha.set_search_properties("loss", "min")
    a, b = trial("a"), trial("b")
    assert asha.on_trial_result(a, {"training_iteration": 2, "loss": 1.0}) == "CONTINUE"
    assert asha.on_trial_result(b, {"training_iteration": 2, "loss": 0.5}) == "CONTINUE"
    c = trial("c")
    assert asha.on_trial_result(c, {"training_iteration": 2, "loss": 2.0}) == "STOP"


def test_asha_needs_a_metric():
    with pytest.raises(ConfigError, match="metric"):
        ASHAScheduler().set_search_properties(None, None)
    with pytest.raises(ConfigError, match="differs"):
        ASHAScheduler(metric="a", mode="max").set_search_properties("b", "max")


def test_median_stopping_rule():
    rule = MedianStoppingRule(time_attr="training_iteration", metric="acc", mode="max",
                              grace_period=1, min_samples_required=2)
    rule.set_search_properties(None, None)
    others = [trial(f"o{i}") for i in range(3)]
    for step in (1, 2, 3):
        for i, t in enumerate(others):
            assert rule.on_trial_result(t, {"training_iteration": step,
                                            "acc": 0.5 + 0.1 * i}) == "CONTINUE"
    worse, better = trial("worse"), trial("better")
    assert rule.on_trial_result(worse, {"training_iteration": 1, "acc": 0.2}) == "STOP"
    assert rule.on_trial_result(worse, {"training_iteration": 2, "acc": 0.9}) == "STOP"
    assert rule.on_trial_result(better, {"training_iteration": 1, "acc": 0.8}) == "CONTINUE"


def test_pbt_bottom_trial_exploits_a_top_trial_with_checkpoint():
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": [0.001, 0.01, 0.1],
                                                        "mom": uniform(0, 1)},
                                  resample_probability=0.0, seed=0)
    pbt.set_search_properties("score", "max")
    trials = [trial(f"t{i}", {"lr": 0.01, "mom": 0.5, "id": i}, checkpoint=f"ckpt{i}")
              for i in range(4)]
    for t in trials:
        pbt.on_trial_add(t)
    for i, t in enumerate(trials[:3]):
        assert pbt.on_trial_result(t, {"training_iteration": 1, "score": i}) == "CONTINUE"
    decision = pbt.on_trial_result(trials[3], {"training_iteration": 2, "score": 10})
    assert decision == "CONTINUE"  # the best trial keeps going
    decision = pbt.on_trial_result(trials[0], {"training_iteration": 2, "score": 0})
    assert isinstance(decision, Exploit)
    assert decision.donor is trials[3] and decision.checkpoint == "ckpt3"
    assert decision.config["id"] == 3  # the donor's config, perturbed
    assert decision.config["lr"] in (0.001, 0.1)  # a neighbour in the list
    assert decision.config["mom"] in (pytest.approx(0.6), pytest.approx(0.4))
    # Not again before the next perturbation interval.
    assert pbt.on_trial_result(trials[0], {"training_iteration": 3, "score": 0}) == "CONTINUE"


def test_pbt_copies_the_donors_latest_checkpoint_when_the_chosen_one_was_dropped(
        tmp_path, caplog):
    """Between the decision and the receiver's next report the donor reports on, and
    its retention (num_to_keep) may delete the checkpoint chosen: the exploit takes the
    donor's latest instead; with neither, the trial goes on unchanged (a warning).
    A deletion under way (its commit marker gone first, some files still there) counts
    as deleted: copying that half-deleted directory failed the trial at its restore."""
    import shutil
    from types import SimpleNamespace

    from engine import Checkpoint, constants
    from engine.tune._pbt import copy_donor_checkpoint

    def committed(data):  # as a trial's checkpoints are: with their commit marker
        ckpt = Checkpoint.from_dict(data)
        with open(os.path.join(ckpt.path, constants.COMMIT_MARKER), "w") as f:
            f.write('{"index": 0}')
        return ckpt

    chosen = committed({"step": 4})
    latest = committed({"step": 6})
    latest.metrics = {"training_iteration": 6}
    donor = SimpleNamespace(trial_name="donor_00000", checkpoint=latest)
    exploit = Exploit(donor=donor, config={"lr": 0.1}, checkpoint=chosen)

    copy, source = copy_donor_checkpoint(exploit, "me")  # the chosen one still exists
    assert source is chosen and copy.to_dict() == {"step": 4} and copy.path != chosen.path
    assert not os.path.exists(os.path.join(copy.path, constants.COMMIT_MARKER))
    os.remove(os.path.join(chosen.path, constants.COMMIT_MARKER))  # its deletion began
    copy, source = copy_donor_checkpoint(exploit, "me")
    assert source is latest and copy.to_dict() == {"step": 6}
    shutil.rmtree(chosen.path)
    copy, source = copy_donor_checkpoint(exploit, "me")
    assert source is latest and copy.to_dict() == {"step": 6}
    assert copy.metrics == {"training_iteration": 6}
    shutil.rmtree(latest.path)
    with caplog.at_level("WARNING", logger="engine"):
        assert copy_donor_checkpoint(exploit, "me") is None
    assert "could not copy donor_00000's checkpoint" in caplog.text
    assert "me goes on unchanged" in caplog.text


def test_pbt_without_a_donor_checkpoint_continues_and_needs_mutations():
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=1,
                                  hyperparam_mutations={"lr": [0.1, 0.2]})
    pbt.set_search_properties("score", "max")
    a, b = trial("a", {"lr": 0.1}), trial("b", {"lr": 0.2})
    pbt.on_trial_result(b, {"training_iteration": 1, "score": 5})
    assert pbt.on_trial_result(a, {"training_iteration": 1, "score": 1}) == "CONTINUE"
    with pytest.raises(ConfigError, match="hyperparam_mutations"):
        PopulationBasedTraining()


# --- Optuna against random search --------------------------------------------------------
def quadratic(config):
    return (config["x"] - 1.5) ** 2 + (config["y"] + 0.5) ** 2


def best_of(searcher, space, n=30):
    searcher.set_search_properties("loss", "min", space, n, None)
    best = math.inf
    for i in range(n):
        config = searcher.suggest(f"t{i}")
        loss = quadratic(config)
        best = min(best, loss)
        searcher.on_trial_complete(f"t{i}", {"loss": loss})
    return best


def test_optuna_tpe_beats_random_search_on_a_quadratic():
    import optuna

    space = {"x": uniform(-5, 5), "y": uniform(-5, 5)}
    optuna_best, random_best = [], []
    for seed in range(5):
        sampler = optuna.samplers.TPESampler(n_startup_trials=5, seed=seed)
        optuna_best.append(best_of(OptunaSearch(sampler=sampler), space))
        random_best.append(best_of(BasicVariantGenerator(seed=seed), space))
    assert statistics.median(optuna_best) < statistics.median(random_best)


def test_optuna_rejects_grids_and_needs_metric():
    with pytest.raises(ConfigError, match="grid_search"):
        OptunaSearch(metric="m", mode="min").set_search_properties(
            None, None, {"x": grid_search([1, 2])}, 1, None)
    with pytest.raises(ConfigError, match="metric"):
        OptunaSearch().set_search_properties(None, None, {"x": uniform(0, 1)}, 1, None)


def test_optuna_keeps_constants_and_nested_paths():
    searcher = OptunaSearch(metric="m", mode="max", seed=0)
    searcher.set_search_properties(None, None, {"train_loop_config": {
        "lr": loguniform(1e-3, 1e-1), "layers": randint(1, 4), "act": choice(["relu", "tanh"]),
        "epochs": 3}}, 5, None)
    config = searcher.suggest("t0")["train_loop_config"]
    assert config["epochs"] == 3 and 1 <= config["layers"] <= 3
    assert 1e-3 <= config["lr"] <= 1e-1 and config["act"] in ("relu", "tanh")
    searcher.on_trial_complete("t0", {"m": 1.0})
    searcher.on_trial_complete("unknown", {"m": 1.0})  # ignored


# --- ResultGrid --------------------------------------------------------------------------
def result(tid, values, error=None, config=None):
    history = [{"training_iteration": i + 1, "acc": v, "trial_id": tid}
               for i, v in enumerate(values)]
    metrics = dict(history[-1], done=error is None) if history else {}
    return Result(metrics=metrics, history=history, error=error, path=f"/x/{tid}",
                  config=config or {"lr": len(values)})


def test_result_grid_best_and_scopes():
    grid = ResultGrid([result("a", [0.1, 0.9, 0.2]), result("b", [0.5, 0.6]),
                       result("c", [float("nan")]), result("d", [], error=RuntimeError("x"))],
                      metric="acc", mode="max", trial_ids=["a", "b", "c", "d"])
    assert len(grid) == 4 and grid.num_errors == 1 and grid.num_terminated == 3
    assert isinstance(grid.errors[0], RuntimeError)
    assert grid.get_best_result().path == "/x/b"            # last value
    assert grid.get_best_result(scope="all").path == "/x/a"  # best value ever
    assert grid.get_best_result("acc", "min").path == "/x/a"
    assert grid.get_best_result(scope="avg").path == "/x/b"
    with pytest.raises(ValueError, match="scope"):
        grid.get_best_result(scope="median")
    with pytest.raises(ValueError, match="metric"):
        ResultGrid([]).get_best_result()
    df = grid.get_dataframe()
    assert list(df["trial_id"]) == ["a", "b", "c", "d"]
    assert "config/lr" in df.columns and df["error"].tolist()[-1] == "RuntimeError"
    best_rows = grid.get_dataframe(filter_metric="acc", filter_mode="max")
    assert best_rows["acc"].tolist()[0] == 0.9
    assert [r.path for r in grid] == ["/x/a", "/x/b", "/x/c", "/x/d"]


def test_scheduler_base_decisions_are_constants():
    assert TrialScheduler.CONTINUE == "CONTINUE" and TrialScheduler.STOP == "STOP"


# --- progress output ---------------------------------------------------------------------
class FakeTerminal:
    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_progress_table_on_a_terminal_and_plain_lines_otherwise():
    from engine.tune._progress import ProgressReporter

    trials = [SimpleNamespace(trial_id="a_00000", trial_name="f_a_00000", status="RUNNING",
                              config={"opt": {"lr": 0.1}}, last_result={
                                  "training_iteration": 3, "loss": 0.25}),
              SimpleNamespace(trial_id="a_00001", trial_name="f_a_00001", status="PENDING",
                              config={"opt": {"lr": 0.01}}, last_result={})]
    term = FakeTerminal(tty=True)
    reporter = ProgressReporter("exp", "loss", [("opt", "lr")], out=term)
    reporter.maybe_report(trials)
    reporter.final(trials)
    lines = term.text.splitlines()
    assert lines[1].split() == ["trial", "status", "lr", "iter", "loss"]
    assert lines[2].split() == ["f_a_00000", "RUNNING", "0.1", "3", "0.25"]
    assert "\x1b[4F" in term.text  # the second table redraws over the first

    plain = FakeTerminal(tty=False)
    reporter = ProgressReporter("exp", None, [("opt", "lr")], out=plain)
    reporter.maybe_report(trials)
    reporter.maybe_report(trials)  # rate-limited: one line per period
    assert plain.text.count("== Tuner exp: 2 trials (1 RUNNING | 1 PENDING)") == 1
    assert "\x1b" not in plain.text
