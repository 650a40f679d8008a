"""The training steps: ``train`` a pipeline's model, ``tune`` its hyperparameters.

Both resume the run named in ``run`` from its latest committed checkpoint when retried,
and run as a Ray job when ``run["execution"]`` (or ``$TRAINYARD_EXECUTION``) says so.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Optional

from engine.runtime import ensure_ray
from tasks.ray_jobs.planning import plan
from tasks.refs import CheckpointRef, TuneRef
from tasks.steps import _training
from tasks.steps.data import DatasetLike
from tasks.steps.names import TaskError

logger = logging.getLogger("tasks")


def train(pipeline: str, datasets: Mapping[str, DatasetLike],
          scaling: Optional[Mapping[str, Any]] = None,
          run: Optional[Mapping[str, Any]] = None) -> CheckpointRef:
    """Train a pipeline's model and return its latest committed checkpoint.

    Args:
        pipeline: A registered pipeline name (``pipelines.list_pipelines()``).
        datasets: ``{"train": DatasetRef, "validation": DatasetRef}`` (split's output).
        scaling: ``{"num_workers": 2, "use_gpu": False, "resources_per_worker": ...}``.
        run: ``{"name", "storage", "config", "max_failures", "num_to_keep", "verbose",
            "execution", "runtime_env"}`` (see ``tasks.steps._training.RunSettings``). The same
            ``name`` resumes that run from its latest committed checkpoint; a finished run
            is returned as it is. ``execution="ray_job"`` runs the step as a Ray job.

    Raises:
        TrainingFailedError: training failed and the engine's retries are spent.
    """
    from pipelines import get_pipeline

    job = plan("train", dict(pipeline=pipeline, datasets=datasets, scaling=scaling,
                                   run=run))
    if job is not None:
        return job.run()
    ensure_ray(background=True)  # Ray starts while the pipeline's framework imports
    spec = get_pipeline(pipeline)
    settings = _training.RunSettings.parse(run)
    refs = _training.train_datasets(datasets)
    config = {**spec.defaults, **settings.config}
    trainer = _training.build_trainer(spec, refs, config, scaling,
                                      settings.run_config(spec))
    result = trainer.fit()
    _plot_learning_curve(result, spec)
    return _training.checkpoint_ref(spec, result, config, refs, settings.storage)


def _plot_learning_curve(result: Any, spec: Any) -> None:
    metrics = [m for m in (spec.metric, "loss") if m in result.metrics]
    try:
        result.plot(metrics=metrics or None)
    except ImportError:
        logger.warning("No learning curve: matplotlib is missing (pip install "
                       "'trainyard[tracking]').")
    except ValueError as exc:  # nothing numeric reported
        logger.warning("No learning curve for %s: %s", result.path, exc)


def tune(pipeline: str, datasets: Mapping[str, DatasetLike],
         param_space: Optional[Mapping[str, Any]] = None,
         tune_config: Optional[Mapping[str, Any]] = None, *,
         scaling: Optional[Mapping[str, Any]] = None,
         run: Optional[Mapping[str, Any]] = None) -> TuneRef:
    """Search a pipeline's hyperparameters; return the best checkpoint and every trial.

    Args:
        pipeline, datasets, scaling: As for :func:`train` (``scaling`` is per trial).
        param_space: The search in JSON form, e.g. ``{"lr": {"loguniform": [1e-3, 1e-2]},
            "hidden": {"grid_search": [32, 64]}}``; default: the pipeline's.
        tune_config: ``num_samples`` (default 1), ``metric``/``mode`` (default the
            pipeline's), ``scheduler`` (``"fifo"`` or ``"asha"`` with ``max_t``,
            ``grace_period``, ``reduction_factor``), ``max_concurrent_trials``, ``seed``,
            ``time_budget_s``.
        run: As for :func:`train`; ``config`` holds the fixed hyperparameters of every
            trial (e.g. fewer epochs than the final training). The same ``name`` resumes
            the experiment (finished trials are kept).

    Raises:
        TaskError: every trial failed (the message has the first error).
    """
    job = plan("tune", dict(pipeline=pipeline, datasets=datasets,
                                  param_space=param_space, tune_config=tune_config,
                                  scaling=scaling, run=run))
    if job is not None:
        return job.run()
    ensure_ray(background=True)  # Ray starts while the pipeline's framework imports
    from engine.tune import Tuner
    from pipelines import get_pipeline

    spec = get_pipeline(pipeline)
    settings = _training.RunSettings.parse(run)
    refs = _training.train_datasets(datasets)
    tc = _training.tune_config(spec, tune_config)
    config = {**spec.defaults, **settings.config}
    space = _training.parse_param_space(spec.param_space if param_space is None
                                        else param_space)
    rc = settings.run_config(spec, settings.name or f"{spec.name}-tune-{int(time.time())}")
    trainer = _training.build_trainer(spec, refs, config, scaling, rc)
    grid = Tuner(trainer, param_space=spec.tune_space(space), tune_config=tc,
                 run_config=rc).fit()
    if grid.num_errors == len(grid):
        raise TaskError(f"Every one of the {len(grid)} trials failed; the first: "
                        f"{grid.errors[0] if grid.errors else 'no trials ran'}")
    best = _training.best_result(grid, tc.metric, tc.mode)
    best_config = _training.json_safe({**config, **spec.config_of(best)})
    return TuneRef(best=_training.checkpoint_ref(spec, best, best_config, refs,
                                                  settings.storage),
                   best_config=best_config, metric=tc.metric, mode=tc.mode,
                   trials=_training.trial_rows(grid, tc.metric, spec.config_of),
                   experiment_uri=grid.experiment_path)


__all__ = ["train", "tune"]
