"""The Tuner on a real local Ray: trainers and functions, early stopping, PBT, Optuna,
failing trials, and restore after the driver is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import engine
from engine import (Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig,
                    TrainingFailedError)
from engine.callbacks import Callback
from engine.trainer import DataParallelTrainer
from engine.tune import (ASHAScheduler, OptunaSearch, PopulationBasedTraining, TuneConfig,
                         Tuner, grid_search, uniform)
from tests.support.subprocess_env import driver_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Recorder(Callback):
    def __init__(self):
        self.events = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.append(("start", trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.events.append(("result", trial.trial_id))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.append(("complete", trial.trial_id))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.events.append(("error", trial.trial_id))

    def max_concurrent(self):
        running = most = 0
        for kind, _ in self.events:
            running += {"start": 1, "complete": -1, "error": -1}.get(kind, 0)
            most = max(most, running)
        return most


def seed_train_func(config):
    start = time.time()
    for _ in range(config["num_epochs"]):
        engine.session.report(dict(output=config["input"]))
    # When this trial's training function ran (rank 0): how many trials overlapped.
    if engine.session.get_world_rank() == 0:
        with open(os.path.join(engine.session.get_trial_dir(), "span.json"), "w") as f:
            json.dump([start, time.time()], f)


def _most_at_once(spans):
    """The most intervals that overlap at one moment (an end before a start at a tie)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_seed_example_grid_over_a_torch_trainer(ray_start_4_cpus, storage_path):
    from engine.torch import TorchTrainer

    rec = Recorder()
    trainer = TorchTrainer(seed_train_func, train_loop_config={"num_epochs": 5, "unused": True},
                           scaling_config=ScalingConfig(num_workers=2))
    tuner = Tuner(
        trainer,
        param_space={"train_loop_config": {"num_epochs": 2, "input": grid_search([1, 2, 3])}},
        tune_config=TuneConfig(num_samples=5, metric="output", mode="max"),
        run_config=RunConfig(name="seed", storage_path=storage_path, callbacks=[rec],
                             verbose=0),
    )
    grid = tuner.fit()
    assert len(grid) == 15 and grid.num_errors == 0 and grid.num_terminated == 15, grid.errors
    best = grid.get_best_result()
    assert best.metrics["output"] == 3
    assert best.config == {"train_loop_config": {"num_epochs": 2, "input": 3}}
    # param_space merged into the trainer's own train_loop_config.
    assert best.metrics["config"] == {"num_epochs": 2, "unused": True, "input": 3}
    assert all(r.metrics["training_iteration"] == 2 for r in grid)
    # <storage_path>/<name>/<trial name>/ per trial, each with its run record.
    exp = os.path.join(storage_path, "seed")
    assert grid.experiment_path == exp and best.path.startswith(exp + os.sep)
    trial_dirs = [d for d in os.listdir(exp) if os.path.isdir(os.path.join(exp, d))]
    assert len(trial_dirs) == 15
    assert all(os.path.exists(os.path.join(exp, d, "run_state.json")) for d in trial_dirs)
    state = json.load(open(os.path.join(exp, "tuner_state.json")))
    assert {t["status"] for t in state["trials"]} == {"TERMINATED"}
    # Six CPUs, 2 workers per trial: at most three trials train at a time (their
    # placement groups enforce it), measured where the training functions ran (the
    # callbacks' order is the driver's and can lag behind).
    spans = [json.load(open(os.path.join(exp, d, "span.json"))) for d in trial_dirs]
    assert len(spans) == 15 and 1 <= _most_at_once(spans) <= 3
    kinds = [k for k, _ in rec.events]
    assert kinds.count("start") == kinds.count("complete") == 15
    assert kinds.count("result") == 30
    df = grid.get_dataframe()
    assert sorted(df["config/train_loop_config/input"].tolist()) == [1] * 5 + [2] * 5 + [3] * 5
    # Finished trials hand their workers (process group destroyed) to the next ones.
    assert len({r.metrics["pid"] for r in grid}) < 15
    # A learning curve per trial, kept in the experiment directory.
    png = grid.plot(metrics=["output"])
    assert png == os.path.join(exp, "learning_curves.png")
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    with pytest.raises(ValueError, match="never_reported"):
        grid.plot(metrics=["never_reported"])


def test_param_space_scaling_config_and_trainer_overrides(ray_start_4_cpus, storage_path):
    def train_func(config):
        engine.report({"world": engine.get_context().get_world_size(), "a": config["a"]})

    trainer = DataParallelTrainer(train_func, train_loop_config={"a": 0},
                                  scaling_config=ScalingConfig(num_workers=1))
    grid = Tuner(trainer, param_space={"scaling_config": {"num_workers": grid_search([1, 2])},
                                       "train_loop_config": {"a": 7}},
                 run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
    assert sorted(r.metrics["world"] for r in grid) == [1, 2]
    assert all(r.metrics["a"] == 7 for r in grid)
    with pytest.raises(engine.ConfigError, match="not a setting"):
        Tuner(trainer, param_space={"learning_rate": 0.1},
              run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()


def quadratic_trainable(config):
    engine.report({"loss": (config["x"] - 1.5) ** 2 + (config["y"] + 0.5) ** 2})


def test_function_trainable_concurrency_and_actor_reuse(ray_start_4_cpus, storage_path):
    rec = Recorder()
    grid = Tuner(
        quadratic_trainable,
        param_space={"x": uniform(-5, 5), "y": uniform(-5, 5)},
        tune_config=TuneConfig(num_samples=8, metric="loss", mode="min",
                               max_concurrent_trials=2, seed=3),
        run_config=RunConfig(storage_path=storage_path, callbacks=[rec], verbose=0),
    ).fit()
    assert len(grid) == 8 and grid.num_errors == 0, grid.errors
    assert rec.max_concurrent() <= 2
    # Trials ran on reused worker processes (at most one per concurrent slot, plus a
    # replacement if a pooled one died).
    assert len({r.metrics["pid"] for r in grid}) <= 3
    best = grid.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in grid)
    assert len({round(r.config["x"], 6) for r in grid}) == 8  # sampled, not repeated


def asha_trainable(config):
    for i in range(1, 10):
        time.sleep(0.05)
        engine.report({"score": config["x"] * i})


def test_asha_stops_most_trials_early_and_keeps_the_best(ray_start_4_cpus, storage_path):
    xs = [6, 11, 2, 9, 1, 4, 10, 0, 3, 8, 5, 7]
    grid = Tuner(
        asha_trainable,
        param_space={"x": grid_search(xs)},
        tune_config=TuneConfig(metric="score", mode="max", max_concurrent_trials=3,
                               scheduler=ASHAScheduler(max_t=9, grace_period=1,
                                                       reduction_factor=3)),
        run_config=RunConfig(storage_path=storage_path, verbose=0),
    ).fit()
    assert len(grid) == 12 and grid.num_errors == 0, grid.errors
    iterations = {r.config["x"]: r.metrics["training_iteration"] for r in grid}
    stopped_early = [x for x, it in iterations.items() if it < 9]
    assert len(stopped_early) >= len(xs) // 2, iterations
    best = grid.get_best_result()
    assert best.config["x"] == 11 and best.metrics["training_iteration"] == 9
    assert all(r.metrics["done"] for r in grid)


STEPS = 16


def pbt_gain(lr, step):
    """The best lr moves over time: from 0.5 at the first step down to 0.1 at the last."""
    return 1 - abs(lr - (0.5 - 0.4 * step / (STEPS - 1)))


def pbt_trainable(config):
    ckpt = engine.get_checkpoint()
    state = ckpt.to_dict() if ckpt else {"step": 0, "value": 0.0, "writer": ""}
    me = engine.get_context().get_trial_id()
    restored_from = state["writer"]
    step, value = state["step"], state["value"]
    while step < STEPS:
        value += pbt_gain(config["lr"], step)
        step += 1
        time.sleep(0.1)
        # mean_gain compares trials fairly when they are at different steps.
        engine.report({"mean_gain": value / step, "value": value, "lr": config["lr"],
                       "restored_from": restored_from},
                      checkpoint=Checkpoint.from_dict({"step": step, "value": value,
                                                       "writer": me}))


def test_pbt_exploits_and_ends_better_than_fixed_configs(ray_start_4_cpus, storage_path):
    lrs = [0.5, 0.6, 0.7, 0.8]

    def tune(scheduler, name):
        return Tuner(
            pbt_trainable, param_space={"lr": grid_search(lrs)},
            tune_config=TuneConfig(metric="mean_gain", mode="max", scheduler=scheduler,
                                   seed=0),
            run_config=RunConfig(name=name, storage_path=storage_path, verbose=0,
                                 checkpoint_config=CheckpointConfig(num_to_keep=2)),
        ).fit()

    fixed = tune(None, "fixed")
    # Exploration draws from the lower values the optimum moves to.
    pbt = tune(PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
        hyperparam_mutations={"lr": [0.1, 0.2, 0.3]}, resample_probability=1.0), "pbt")
    assert fixed.num_errors == 0 and pbt.num_errors == 0, fixed.errors + pbt.errors
    best_fixed = max(sum(pbt_gain(lr, s) for s in range(STEPS)) for lr in lrs)
    assert fixed.get_best_result(metric="value").metrics["value"] == pytest.approx(best_fixed)
    assert pbt.get_best_result(metric="value").metrics["value"] > best_fixed + 1e-6

    state = json.load(open(os.path.join(storage_path, "pbt", "tuner_state.json")))
    exploits = {t["trial_id"]: t["exploits"] for t in state["trials"]}
    assert sum(len(e) for e in exploits.values()) >= 1
    restored_from_others = False
    for result in pbt:
        trial_id = result.metrics["trial_id"]
        mine = exploits[trial_id]
        if not mine:
            assert not os.path.exists(os.path.join(result.path, "pbt_policy.json"))
            continue
        # Every exploit is in the trial's directory and its history: the config changed,
        # and the rows reported after it carry a perturbed tag.
        assert json.load(open(os.path.join(result.path, "pbt_policy.json"))) == mine
        assert result.config == mine[-1]["new_config"]
        # Rows are in report order. An exploit restarts the trial at its donor's
        # training_iteration, which may be behind its own (as in Ray Tune), so rows are
        # picked by position: the first exploit came after rows 1..k, the last restart
        # went on from the donor's iteration to the end. A donor that had made its last
        # report (a late-started trial exploits one that is done but for its exit)
        # leaves the restart nothing to train, as in Ray Tune: no rows after it.
        history = result.metrics_dataframe
        assert list(history["training_iteration"][:mine[0]["training_iteration"]]) == \
            list(range(1, mine[0]["training_iteration"] + 1))
        after = history.iloc[mine[0]["training_iteration"]:]
        assert len(after) or mine[0]["donor_training_iteration"] == STEPS
        assert after["experiment_tag"].str.contains("@perturbed").all()
        donor_at = mine[-1]["donor_training_iteration"]
        last = history.iloc[len(history) - (STEPS - donor_at):]
        assert list(last["training_iteration"]) == list(range(donor_at + 1, STEPS + 1))
        assert set(last["lr"]) <= {result.config["lr"]}
        restored = set(history["restored_from"]) - {"", trial_id}
        restored_from_others |= bool(restored)
    # Restarted trials resumed from checkpoints written by other trials.
    assert restored_from_others


def test_optuna_search_finds_the_quadratic_minimum(ray_start_4_cpus, storage_path):
    import optuna

    grid = Tuner(
        quadratic_trainable,
        param_space={"x": uniform(-5, 5), "y": uniform(-5, 5)},
        tune_config=TuneConfig(
            num_samples=25, metric="loss", mode="min", max_concurrent_trials=2,
            search_alg=OptunaSearch(sampler=optuna.samplers.TPESampler(n_startup_trials=5,
                                                                       seed=0))),
        run_config=RunConfig(storage_path=storage_path, verbose=0),
    ).fit()
    assert len(grid) == 25 and grid.num_errors == 0, grid.errors
    best = grid.get_best_result()
    assert best.metrics["loss"] < 1.0
    assert abs(best.config["x"] - 1.5) < 1.0 and abs(best.config["y"] + 0.5) < 1.0


def flaky_trainable(config):
    with open(config["log"], "a") as f:
        f.write(f"{config['x']}\n")
    engine.report({"x": config["x"]})
    if config["x"] == 2:
        raise ValueError("boom on x=2")


def test_a_failing_trial_does_not_stop_the_others(ray_start_4_cpus, storage_path, tmp_path):
    rec = Recorder()
    log = tmp_path / "attempts.txt"
    grid = Tuner(
        flaky_trainable,
        param_space={"x": grid_search([1, 2, 3]), "log": str(log)},
        tune_config=TuneConfig(metric="x", mode="max"),
        run_config=RunConfig(storage_path=storage_path, callbacks=[rec], verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert len(grid) == 3 and grid.num_errors == 1 and grid.num_terminated == 2
    (error,) = grid.errors
    assert isinstance(error, TrainingFailedError) and "boom on x=2" in str(error)
    failed = [r for r in grid if r.error is not None][0]
    assert failed.config["x"] == 2 and failed.metrics["x"] == 2
    assert grid.get_best_result().config["x"] == 3
    # FailureConfig applies per trial: the failing one ran twice, the others once.
    attempts = log.read_text().split()
    assert sorted(attempts) == ["1", "2", "2", "3"]
    assert [k for k, _ in rec.events].count("error") == 1


DRIVER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    import engine
    from engine import Checkpoint, RunConfig
    from engine.tune import Tuner, TuneConfig, grid_search

    def trainable(config):
        ckpt = engine.get_checkpoint()
        step = ckpt.to_dict()["step"] if ckpt else 0
        with open(config["log"], "a") as f:
            f.write(json.dumps({{"id": config["id"], "start": step}}) + "\\n")
        while step < 8:
            time.sleep(0.25)
            step += 1
            engine.report({{"step": step}}, checkpoint=Checkpoint.from_dict({{"step": step}}))
        with open(config["log"], "a") as f:
            f.write(json.dumps({{"id": config["id"], "done": step}}) + "\\n")

    mode, storage, log = sys.argv[1:4]
    if mode == "fit":
        tuner = Tuner(trainable,
                      param_space={{"id": grid_search([0, 1, 2, 3]), "log": log}},
                      tune_config=TuneConfig(metric="step", mode="max",
                                             max_concurrent_trials=2),
                      run_config=RunConfig(name="exp", storage_path=storage, verbose=0))
    else:
        tuner = Tuner.restore(os.path.join(storage, "exp"), trainable)
    grid = tuner.fit()
    print("FINAL", json.dumps(sorted([r.config["id"], r.metrics["step"], r.error is None]
                                     for r in grid)))
""")


def _entries(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.timeout(400)
def test_restore_after_driver_sigkill(storage_path, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=REPO))
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, str(script), "fit", storage_path, str(log)],
                            env=driver_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180

    def ready():
        entries = _entries(log)
        done = {e["id"] for e in entries if "done" in e}
        started = {e["id"] for e in entries if "start" in e}
        return len(done) >= 2 and len(started - done) >= 1

    while not ready() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert ready(), proc.stdout.read().decode()[-3000:] if proc.poll() is not None else ""
    time.sleep(1.0)  # let the unfinished trials commit a checkpoint or two
    os.kill(proc.pid, signal.SIGKILL)  # the driver alone, as a lost head node would
    proc.wait()
    before = _entries(log)
    done_before = {e["id"] for e in before if "done" in e}
    assert done_before and len(done_before) < 4

    out = subprocess.run([sys.executable, str(script), "restore", storage_path, str(log)],
                         env=driver_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    final = json.loads(out.stdout.split("FINAL", 1)[1])
    assert final == [[i, 8, True] for i in range(4)]
    after = _entries(log)[len(before):]
    # No finished trial ran again; unfinished ones continued from their checkpoints.
    assert not {e["id"] for e in after} & done_before
    resumed = [e for e in after if "start" in e]
    assert {e["id"] for e in resumed} == set(range(4)) - done_before
    started_before = {e["id"] for e in before if "start" in e}
    assert any(e["start"] > 0 for e in resumed if e["id"] in started_before)


def slow_trainable(config):
    for i in range(200):
        time.sleep(0.05)
        engine.report({"i": i})


def test_time_budget_stops_running_trials_and_starts_no_more(ray_start_4_cpus,
                                                             storage_path):
    grid = Tuner(slow_trainable, param_space={"x": grid_search(list(range(6)))},
                 tune_config=TuneConfig(max_concurrent_trials=2, time_budget_s=2.0),
                 run_config=RunConfig(storage_path=storage_path, verbose=0)).fit()
    assert 1 <= len(grid) <= 3 and grid.num_errors == 0, grid.errors
    assert all(r.metrics["done"] and r.metrics["training_iteration"] < 200 for r in grid)


def checkpointed_flaky(config):
    ckpt = engine.get_checkpoint()
    start = ckpt.to_dict()["i"] + 1 if ckpt else 0
    with open(config["log"], "a") as f:
        f.write(json.dumps({"x": config["x"], "start": start}) + "\n")
    for i in range(start, 4):
        engine.report({"i": i}, checkpoint=Checkpoint.from_dict({"i": i}))
        if config["x"] == 1 and i == 1 and not os.path.exists(config["fixed"]):
            raise RuntimeError("not yet")


@pytest.mark.parametrize("option", ["resume_errored", "restart_errored"])
def test_restore_errored_trials(ray_start_4_cpus, storage_path, tmp_path, option):
    log, fixed = tmp_path / "log.jsonl", tmp_path / "fixed"
    space = {"x": grid_search([0, 1]), "log": str(log), "fixed": str(fixed)}
    grid = Tuner(checkpointed_flaky, param_space=space,
                 run_config=RunConfig(name="exp", storage_path=storage_path, verbose=0)).fit()
    assert grid.num_errors == 1
    path = os.path.join(storage_path, "exp")
    # Without an option the failed trial stays failed and nothing runs again.
    assert Tuner.restore(path, checkpointed_flaky).fit().num_errors == 1
    assert len(log.read_text().splitlines()) == 2
    fixed.write_text("ok")
    grid = Tuner.restore(path, checkpointed_flaky, **{option: True}).fit()
    assert grid.num_errors == 0 and sorted(r.metrics["i"] for r in grid) == [3, 3], grid.errors
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(s["x"] for s in starts[:2]) == [0, 1] and len(starts) == 3
    assert starts[-1]["x"] == 1  # only the failed trial ran again
    assert starts[-1]["start"] == (2 if option == "resume_errored" else 0)
