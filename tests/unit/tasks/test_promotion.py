"""Promotion without Ray: champion/challenger gates over the file-pointer registry.

The checkpoints here are references only; the champion's metrics on the data come from
its cached evaluation (``<run>/evaluations/<checkpoint>-<fingerprint>/metrics.json``,
where ``evaluate`` keeps them), or from ``evaluate`` itself, replaced by a counter.
"""

from __future__ import annotations

import json
import os

import pytest

from engine.exceptions import ConfigError
from tasks import registry as _registry
from tasks import steps as core
from tasks.steps import promotion
from tasks.refs import CheckpointRef, DatasetRef

FP = "f" * 64


def _ckpt(tmp_path, name: str) -> CheckpointRef:
    run = tmp_path / "runs" / "digits-run"
    return CheckpointRef(uri=str(run / name), framework="torch", pipeline="digits",
                         run_uri=str(run), run_name="digits-run", storage=str(tmp_path))


def _metrics(ckpt: CheckpointRef, accuracy: float, log_loss: float = 0.3) -> dict:
    return {"accuracy": accuracy, "log_loss": log_loss, "f1": accuracy,
            "checkpoint_uri": ckpt.uri, "dataset_fingerprint": FP}


def _cache(ckpt: CheckpointRef, metrics: dict) -> str:
    """Metrics as ``evaluate`` would have written them for ``ckpt`` on the data ``FP``."""
    path = os.path.join(ckpt.run_uri, "evaluations",
                        f"{os.path.basename(ckpt.uri)}-{FP[:12]}", "metrics.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump(metrics, f)
    return path


def _validation() -> DatasetRef:
    return DatasetRef(uri="/data/validation", format="parquet", num_rows=10,
                      schema={"x": "double"}, fingerprint=FP)


def test_champion_conditions_parse_beside_absolute_ones():
    conds = _registry.parse_gate({"accuracy": [">=0.9", ">=champion"],
                                  "log_loss": "<=champion-0.01", "f1": ">= champion*0.99"})
    assert conds == [("accuracy", ">=", 0.9),
                     ("accuracy", ">=", _registry.ChampionBound("+", 0.0)),
                     ("log_loss", "<=", _registry.ChampionBound("-", 0.01)),
                     ("f1", ">=", _registry.ChampionBound("*", 0.99))]
    assert [str(b) for _, _, b in conds[1:]] == ["champion", "champion-0.01",
                                                 "champion*0.99"]


def test_champion_conditions_compare_with_the_champion_metrics():
    conds = _registry.parse_gate({"accuracy": [">=0.9", ">=champion"],
                                  "log_loss": "<=champion-0.01", "f1": ">=champion*0.99"})
    candidate = {"accuracy": 0.95, "log_loss": 0.25, "f1": 0.90}
    ok, reasons = _registry.check_gate(conds, candidate,
                                       {"accuracy": 0.94, "log_loss": 0.30, "f1": 0.905})
    assert ok, reasons
    ok, reasons = _registry.check_gate(conds, candidate,
                                       {"accuracy": 0.96, "log_loss": 0.255, "f1": 0.95})
    assert not ok
    assert reasons[1] == "accuracy 0.95 >= champion: FAIL (champion 0.96: >= 0.96)"
    assert reasons[2].startswith("log_loss 0.25 <= champion-0.01: FAIL")
    assert reasons[3].startswith("f1 0.9 >= champion*0.99: FAIL")


def test_with_no_champion_yet_a_champion_condition_passes_and_says_so():
    ok, reasons = _registry.check_gate(_registry.parse_gate({"accuracy": ">=champion"}),
                                       {"accuracy": 0.5})
    assert ok and reasons == ["accuracy 0.5 >= champion: pass (no champion yet)"]


@pytest.mark.parametrize("cond", [">=champoin", ">=champion-", ">=champion/2", "champion",
                                  ">=champion - x"])
def test_unknown_gate_operand_is_a_config_error_before_anything_is_evaluated(
        tmp_path, monkeypatch, cond):
    def never(*args, **kwargs):
        raise AssertionError("nothing may be evaluated")

    monkeypatch.setattr(promotion, "evaluate", never)
    monkeypatch.setattr(_registry.FileRegistry, "current", never)
    cand = _ckpt(tmp_path, "checkpoint_000001")
    with pytest.raises(ConfigError, match=r"not a condition.*'>=champion'"):
        core.promote(cand, _metrics(cand, 0.9), gate={"accuracy": cond},
                     dataset=_validation())
    assert not (tmp_path / "models").exists()


def test_a_worse_challenger_is_rejected_and_both_metrics_are_in_the_history(tmp_path):
    champ, cand = _ckpt(tmp_path, "checkpoint_000001"), _ckpt(tmp_path, "checkpoint_000002")
    first = core.promote(champ, _metrics(champ, 0.95), gate={"accuracy": ">=champion"})
    assert first.promoted and first.reasons[0].endswith("(no champion yet)")
    _cache(champ, _metrics(champ, 0.95))
    gate = {"accuracy": [">=0.9", ">=champion"]}
    second = core.promote(cand, _metrics(cand, 0.93), gate=gate)
    assert not second.promoted and second.previous == champ
    assert second.champion_metrics["accuracy"] == 0.95
    assert core.resolve_alias("digits", storage=str(tmp_path)) == champ
    history = core.alias_history("digits", storage=str(tmp_path))
    assert [h["decision"] for h in history] == ["promoted", "rejected"]
    assert history[1]["metrics"]["accuracy"] == 0.93
    assert history[1]["champion_metrics"]["accuracy"] == 0.95
    assert history[1]["champion_metrics"]["checkpoint_uri"] == champ.uri
    assert history[1]["context"]["data_fingerprint"] == FP
    # Not worse (equal) passes: the alias moves.
    third = core.promote(cand, _metrics(cand, 0.95), gate=gate)
    assert third.promoted and core.resolve_alias("digits", storage=str(tmp_path)) == cand


def test_the_champion_is_evaluated_on_the_dataset_once_then_cached(tmp_path, monkeypatch):
    champ, cand = _ckpt(tmp_path, "checkpoint_000001"), _ckpt(tmp_path, "checkpoint_000002")
    core.promote(champ, _metrics(champ, 0.95), gate={})
    calls = []

    def fake_evaluate(checkpoint, dataset, **kwargs):
        calls.append((checkpoint.uri, dataset))
        metrics = _metrics(checkpoint, 0.91)
        _cache(checkpoint, metrics)  # evaluate keeps its metrics there
        return metrics

    monkeypatch.setattr(promotion, "evaluate", fake_evaluate)
    gate = {"accuracy": ">=champion"}
    # No data to evaluate the champion on, and no earlier evaluation: say what to pass.
    with pytest.raises(ConfigError, match=r"promote\(dataset=\.\.\.\)"):
        core.promote(cand, _metrics(cand, 0.93), gate=gate)
    decision = core.promote(cand, _metrics(cand, 0.93), gate=gate, dataset=_validation())
    assert decision.promoted and decision.champion_metrics["accuracy"] == 0.91
    assert calls == [(champ.uri, _validation())]
    # A data set other than the candidate's is refused.
    other = DatasetRef(**{**_validation().to_dict(), "fingerprint": "0" * 64})
    with pytest.raises(ConfigError, match="not the data these metrics"):
        core.promote(cand, _metrics(cand, 0.93), gate=gate, dataset=other)


def test_builtin_pipelines_gate_on_a_floor_and_the_champion():
    from pipelines import get_pipeline

    for name in ("digits", "breast_cancer"):
        conds = _registry.parse_gate(get_pipeline(name).gate)
        assert ("accuracy", ">=", 0.9) in conds
        assert ("accuracy", ">=", _registry.ChampionBound()) in conds


def test_two_promoters_racing_each_move_the_alias_only_from_the_champion_they_judged(
        tmp_path):
    """Two promoters decide against the same champion at once. Each moves the alias only
    if it still points at that champion (a compare-and-swap under the pointer's lock): the
    one that lost the race decides again against the winner, so the alias ends at the
    better candidate and each promotion in the history replaced the one before it."""
    import fcntl
    import threading

    champ, first, second = (_ckpt(tmp_path, f"checkpoint_00000{i}") for i in (1, 2, 3))
    core.promote(champ, _metrics(champ, 0.90), gate={})
    for ckpt, acc in ((champ, 0.90), (first, 0.95), (second, 0.97)):
        _cache(ckpt, _metrics(ckpt, acc))
    registry = tmp_path / "models" / "digits"
    history_dir = registry / "history" / "production"
    # Hold the pointer's lock as a promoter in the middle of its swap would, until both
    # racers have decided against ``champ`` and wait on it.
    lock = os.open(registry / ".production.json.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    gate = {"accuracy": ">=champion"}
    results, errors = {}, []

    def promote(ckpt, acc):
        try:
            results[ckpt.uri] = core.promote(ckpt, _metrics(ckpt, acc), gate=gate)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    racers = [threading.Thread(target=promote, args=a) for a in ((first, 0.95),
                                                                  (second, 0.97))]
    for t in racers:
        t.start()
    while len(os.listdir(history_dir)) < 3 and all(t.is_alive() for t in racers):
        threading.Event().wait(0.01)
    os.close(lock)
    for t in racers:
        t.join(30)
    assert not errors, errors
    assert core.resolve_alias("digits", storage=str(tmp_path)) == second
    history = core.alias_history("digits", storage=str(tmp_path))
    decisions = [h["decision"] for h in history]
    assert decisions.count("superseded") == 1, decisions
    superseded = next(h for h in history if h["decision"] == "superseded")
    assert superseded["previous"]["uri"] == champ.uri
    assert "moved from" in superseded["reasons"][-1]
    # Every promotion replaced the one before it: a chain from the champion.
    promoted = [h for h in history if h["decision"] == "promoted"]
    assert [h["previous"] and h["previous"]["uri"] for h in promoted[1:]] == \
        [h["checkpoint"]["uri"] for h in promoted[:-1]]
    assert promoted[-1]["checkpoint"]["uri"] == second.uri
    # The loser's decision taken again compared it with the winner, not the old champion.
    loser = first if superseded["checkpoint"]["uri"] == first.uri else second
    again = results[loser.uri]
    assert again.previous is not None and again.previous.uri != champ.uri
