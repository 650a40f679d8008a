"""How datasets reach the workers when the workers would leave no CPU for Ray Data.

Ray Data runs its read and map operators as tasks of one CPU each. A worker group that
reserves every CPU of the instance (2 workers on a 2-core machine whose Ray was started
by ``ray.data.read_csv`` with one logical CPU per core) would wait forever for its data.
Three plans, tried in order:

- ``stream``: at least one CPU is left: the datasets stream to the workers as usual.
- ``fractional``: on an instance trainyard did not size itself, with no CPU amount asked
  for in ``resources_per_worker``, each worker reserves ``(CPUs - 1) / num_workers``
  CPUs (e.g. 0.5) so that one stays free for Ray Data. The workers still use the cores.
- ``materialize``: otherwise the datasets are read (and preprocessed) into the object
  store *before* the workers reserve the CPUs, and split there; iterating materialised
  splits runs no CPU task.

Only an instance without a single CPU is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from engine.exceptions import WorkerGroupStartupError

STREAM = "stream"
FRACTIONAL = "fractional"
MATERIALIZE = "materialize"
#: Below this a worker's CPU reservation would not describe its load at all.
MIN_WORKER_CPUS = 0.1


@dataclass
class DataPlan:
    """The chosen plan; ``worker_cpus`` is the fractional reservation per worker."""

    kind: str
    worker_cpus: Optional[float] = None
    message: str = ""


def plan_data(num_workers: int, worker_cpus: float, explicit_cpus: bool,
              total_cpus: float, sized_by_trainyard: bool) -> DataPlan:
    """Pick the plan (see the module docstring).

    Args:
        num_workers: Workers of the group.
        worker_cpus: CPUs each reserves now.
        explicit_cpus: ``resources_per_worker`` names a CPU amount (kept as asked).
        total_cpus: Logical CPUs of the Ray instance.
        sized_by_trainyard: trainyard started this Ray instance with its own CPU count.

    Raises:
        WorkerGroupStartupError: the instance has no CPU for Ray Data at all.
    """
    spare = total_cpus - worker_cpus * num_workers
    if spare >= 1 - 1e-9:
        return DataPlan(STREAM)
    if total_cpus < 1 - 1e-9:
        raise WorkerGroupStartupError(
            f"This Ray instance has {total_cpus:g} CPUs: Ray Data needs at least one to read "
            "the datasets, before or beside the workers. Start Ray with at least one CPU "
            "(ray.init(num_cpus=2)), or pass the data to the workers another way.")
    if not sized_by_trainyard and not explicit_cpus:
        cpus = math.floor((total_cpus - 1) / num_workers * 100) / 100
        if cpus >= MIN_WORKER_CPUS:
            return DataPlan(FRACTIONAL, cpus, (
                f"The {num_workers} workers would take all {total_cpus:g} CPUs of this Ray "
                f"instance (not started by trainyard) and leave none for Ray Data: each "
                f"worker reserves {cpus:g} CPU instead, keeping one for the datasets. Set "
                "ScalingConfig(resources_per_worker={'CPU': ...}) to choose yourself."))
    return DataPlan(MATERIALIZE, None, (
        f"The {num_workers} workers of {worker_cpus:g} CPU take {worker_cpus * num_workers:g} "
        f"of the {total_cpus:g} CPUs of this Ray instance and leave none for Ray Data: the "
        "datasets are read into the object store before the workers start, and split "
        "there (the data must fit in the object store, or Ray spills it to disk). Start "
        "Ray with more CPUs, or reserve less per worker, to stream them instead."))
