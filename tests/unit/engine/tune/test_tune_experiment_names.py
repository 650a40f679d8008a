"""Default experiment names: two Tuners started within the same second get two
directories (the second must not resume the first's trials)."""

from __future__ import annotations

from engine.tune._experiment import fresh_experiment, open_experiment


def test_a_taken_default_name_gets_a_suffix(tmp_path):
    first = fresh_experiment(str(tmp_path), "objective_2026-01-01_00-00-00")
    assert first.storage.root.endswith("objective_2026-01-01_00-00-00")
    first.save({"name": "x", "trials": []})  # the first Tuner wrote its state
    second = fresh_experiment(str(tmp_path), "objective_2026-01-01_00-00-00")
    assert second.storage.root.endswith("objective_2026-01-01_00-00-00_2")
    assert not second.exists()
    (tmp_path / "objective_2026-01-01_00-00-00_2").mkdir()  # created, no state yet
    third = fresh_experiment(str(tmp_path), "objective_2026-01-01_00-00-00")
    assert third.storage.root.endswith("objective_2026-01-01_00-00-00_3")


def test_an_explicit_name_is_resumed_not_renamed(tmp_path):
    store = open_experiment(str(tmp_path), "mine")
    store.save({"name": "mine", "trials": []})
    assert open_experiment(str(tmp_path), "mine").exists()
