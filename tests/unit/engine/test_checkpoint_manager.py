import math

from engine import CheckpointConfig
from engine._internal.checkpoint.manager import CheckpointManager


def _run(manager, losses):
    dropped = []
    for i, loss in enumerate(losses):
        dropped += manager.register(manager.next_index, i + 1, {"loss": loss})
    return dropped


def test_keeps_best_two_plus_latest_seed_example():
    m = CheckpointManager(CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                                           checkpoint_score_order="min"))
    dropped = _run(m, [2, 4, 1, 3])
    assert [t.metrics["loss"] for t in m.best()] == [2, 1]
    assert [t.dir_name for t in m.best()] == ["checkpoint_000000", "checkpoint_000002"]
    assert m.latest.dir_name == "checkpoint_000003"
    assert sorted(t.dir_name for t in m.tracked) == [
        "checkpoint_000000", "checkpoint_000002", "checkpoint_000003"]
    assert [t.dir_name for t in dropped] == ["checkpoint_000001"]


def test_latest_dropped_once_newer_arrives():
    m = CheckpointManager(CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="acc"))
    m.register(0, 1, {"acc": 0.9})
    m.register(1, 2, {"acc": 0.5})  # kept as latest
    dropped = m.register(2, 3, {"acc": 0.4})
    assert {t.index for t in dropped} == {1}
    assert {t.index for t in m.tracked} == {0, 2}


def test_without_score_keeps_most_recent():
    m = CheckpointManager(CheckpointConfig(num_to_keep=2))
    _run(m, [1] * 10)
    assert [t.index for t in m.tracked] == [8, 9]


def test_keep_all_by_default():
    m = CheckpointManager(CheckpointConfig())
    assert _run(m, [1, 2, 3]) == []
    assert len(m.tracked) == 3


def test_nan_and_missing_scores_rank_worst():
    m = CheckpointManager(CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="acc"))
    m.register(0, 1, {"acc": math.nan})
    m.register(1, 2, {"acc": 0.1})
    m.register(2, 3, {})
    m.register(3, 4, {"acc": 0.05})
    assert [t.index for t in m.best()] == [1]


def test_numbering_survives_serialisation():
    cfg = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                           checkpoint_score_order="min")
    m = CheckpointManager(cfg)
    _run(m, [5, 4, 3])
    again = CheckpointManager.from_json(cfg, m.to_json())
    assert again.next_dir_name() == "checkpoint_000003"
    again.register(3, 4, {"loss": 10})
    assert sorted(t.index for t in again.tracked) == [1, 2, 3]


def test_nested_score_attribute():
    m = CheckpointManager(CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="eval/acc"))
    m.register(0, 1, {"eval": {"acc": 0.2}})
    m.register(1, 2, {"eval": {"acc": 0.8}})
    m.register(2, 3, {"eval": {"acc": 0.1}})
    assert [t.index for t in m.best()] == [1]
