"""Issue 23, gap 9: which plan gets the datasets to workers that take every CPU."""

from __future__ import annotations

import pytest

from engine._internal.data.plan import FRACTIONAL, MATERIALIZE, STREAM, plan_data
from engine.exceptions import WorkerGroupStartupError


def test_a_spare_cpu_streams():
    assert plan_data(2, 1.0, False, 4.0, True).kind == STREAM
    assert plan_data(2, 0.5, True, 2.0, False).kind == STREAM


def test_an_instance_ray_data_started_gets_fractional_workers():
    plan = plan_data(2, 1.0, False, 2.0, sized_by_trainyard=False)
    assert plan.kind == FRACTIONAL and plan.worker_cpus == 0.5
    assert "reserves 0.5 CPU" in plan.message and "resources_per_worker" in plan.message
    assert plan_data(3, 1.0, False, 2.0, False).worker_cpus == 0.33


def test_cpus_asked_for_or_sized_by_trainyard_read_the_data_first():
    for plan in (plan_data(2, 1.0, True, 2.0, False), plan_data(2, 1.0, False, 2.0, True),
                 plan_data(20, 1.0, False, 2.0, False)):  # 0.05 CPU a worker is too little
        assert plan.kind == MATERIALIZE and "object store" in plan.message


def test_no_cpu_at_all_is_refused_with_the_reason():
    with pytest.raises(WorkerGroupStartupError, match="at least one"):
        plan_data(1, 0.0, True, 0.0, False)
