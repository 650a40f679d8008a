import threading

import numpy as np
import pytest

from engine._internal.execution.rounds import RoundTracker
from engine._internal.worker_group.session import (ReportItem, TrainContext, TrainSession,
                                      validate_metrics)


@pytest.mark.parametrize("metrics", [
    {"a": 1, "b": 2.5, "c": True, "d": "x", "e": None},
    {"nested": {"k": [1, 2, {"z": 3.0}]}},
    {"nan": float("nan")},
])
def test_plain_metrics_accepted(metrics):
    validate_metrics(metrics)


def test_array_metric_is_type_error_naming_key():
    with pytest.raises(TypeError, match=r"'loss'.*numpy.*\.item\(\)"):
        validate_metrics({"loss": np.float32(1.0) * np.ones(2)})


def test_nested_bad_value_names_path():
    with pytest.raises(TypeError, match=r"'eval\.scores\[1\]'"):
        validate_metrics({"eval": {"scores": [1, object()]}})


def test_non_dict_metrics():
    with pytest.raises(TypeError, match="dict"):
        validate_metrics([1, 2])


def _session():
    return TrainSession(TrainContext(world_rank=0, world_size=1), storage=None,
                        attempt="t", start_iteration=3)


def test_report_adds_automatic_fields_and_counts_from_start_iteration():
    s = _session()
    s.report({"x": 1})
    items, done = s.drain(0.1)
    assert not done and len(items) == 1
    m = items[0].metrics
    assert m["x"] == 1 and m["training_iteration"] == 4 and m["iterations_since_restore"] == 1
    for key in ("time_this_iter_s", "time_total_s", "timestamp", "date", "hostname",
                "node_ip", "pid", "time_since_restore"):
        assert key in m


def test_drain_wakes_on_finish_without_waiting_timeout():
    s = _session()
    threading.Timer(0.05, s.mark_finished).start()
    items, done = s.drain(30)
    assert items == [] and done


def test_round_tracker_pairs_ranks_in_order():
    t = RoundTracker(2)
    t.add(0, ReportItem(1, {"r": 0}))
    t.add(0, ReportItem(2, {"r": 0}))
    assert t.pop_complete() == []
    t.add(1, ReportItem(1, {"r": 1}))
    rounds = t.pop_complete()
    assert [it for it, _ in rounds] == [1]
    assert rounds[0][1][1].metrics == {"r": 1}


def test_round_tracker_detects_uneven_reports():
    t = RoundTracker(2)
    t.add(0, ReportItem(1, {}))
    t.add(0, ReportItem(2, {}))
    t.add(1, ReportItem(1, {}))
    assert t.mismatch() is None  # rank 1 may still be on its way
    t.finish(1)
    msg = t.mismatch()
    assert "rank 0: 2, rank 1: 1" in msg and "same number of times" in msg


def test_the_startup_heap_is_frozen_before_train_func_and_thawed_after():
    import gc

    from engine._internal.worker_group import worker

    assert gc.get_freeze_count() == 0
    try:
        worker._freeze_startup_objects()
        assert gc.get_freeze_count() > 0
    finally:
        worker._unfreeze()
    assert gc.get_freeze_count() == 0


class _Cycle:
    def __init__(self):
        self.me = self


def test_a_reused_worker_collects_the_last_trials_cycles_before_it_freezes(monkeypatch):
    """A fresh worker collects only the young generations before freezing (its heap is
    imports); a worker that ran a train_func before also collects the oldest one, where
    the last trial's cycles are after ``_unfreeze``: frozen, they would never be freed."""
    import gc
    import weakref

    from engine._internal.worker_group import worker

    monkeypatch.setattr(worker, "_ran_train_func", False)
    assert gc.get_freeze_count() == 0
    was_enabled = gc.isenabled()
    gc.disable()  # only the worker's own passes collect here
    try:
        young = weakref.ref(_Cycle())
        worker._freeze_startup_objects()  # a fresh worker, before its first train_func
        assert young() is None
        assert gc.get_freeze_count() > 0
        last_trial = _Cycle()
        worker._unfreeze()  # train_func returned
        gc.freeze()
        gc.unfreeze()  # everything now in the oldest generation, as after a long trial
        left = weakref.ref(last_trial)
        del last_trial
        worker._freeze_startup_objects()  # the next trial on the same worker
        assert left() is None
    finally:
        worker._unfreeze()
        if was_enabled:
            gc.enable()
    assert gc.get_freeze_count() == 0


def test_numpy_scalars_are_reported_as_the_numbers_they_hold_as_in_ray():
    import numpy as np

    from engine._internal.worker_group.session import plain_metrics, validate_metrics

    metrics = plain_metrics({"loss": np.float32(0.5), "steps": [np.int64(3)],
                             "val": {"ok": np.bool_(True)}, "lr": 0.1})
    assert metrics == {"loss": 0.5, "steps": [3], "val": {"ok": True}, "lr": 0.1}
    assert type(metrics["loss"]) is float and type(metrics["steps"][0]) is int
    validate_metrics(metrics)
    # An array is still refused, naming the key (report(loss=batch_losses) is a bug).
    with pytest.raises(TypeError, match="'losses' has type numpy.ndarray"):
        validate_metrics(plain_metrics({"losses": np.array([1.0, 2.0])}))
