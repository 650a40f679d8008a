"""MLflow at Ray's path (``ray.air.integrations.mlflow``): ``MLflowLoggerCallback`` on
the driver, ``setup_mlflow`` inside a training function. MLflow is imported when used
(``pip install 'trainyard[tracking]'``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from engine.callbacks.mlflow import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]


class _NoopModule:
    """What ranks other than 0 get: every ``mlflow.<call>(...)`` does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def setup_mlflow(config: Optional[Dict[str, Any]] = None,
                 tracking_uri: Optional[str] = None, registry_uri: Optional[str] = None,
                 experiment_id: Optional[str] = None,
                 experiment_name: Optional[str] = None,
                 tracking_token: Optional[str] = None,
                 artifact_location: Optional[str] = None, run_name: Optional[str] = None,
                 create_experiment_if_not_exists: bool = False,
                 tags: Optional[Dict[str, Any]] = None, rank_zero_only: bool = True) -> Any:
    """Start an MLflow run for this training run (or trial) and return ``mlflow``.

    Call it in the training function. It sets the tracking (and registry) URI, picks the
    experiment (by id, then name; ``MLFLOW_EXPERIMENT_ID``/``_NAME`` otherwise), starts
    a run named after the trial and logs ``config`` as parameters.

    Args:
        config: Logged as the run's parameters (nested keys as ``a/b``).
        tracking_uri, registry_uri: MLflow's URIs.
        experiment_id, experiment_name: The experiment to log into.
        tracking_token: Sets ``MLFLOW_TRACKING_TOKEN``.
        artifact_location: For an experiment this call creates.
        run_name: Defaults to the trial's name.
        create_experiment_if_not_exists: Create ``experiment_name`` when missing.
        tags: Run tags (``trial_id`` and ``trial_name`` are added).
        rank_zero_only: Other ranks get a module whose calls do nothing.

    Returns:
        The ``mlflow`` module (or that no-op stand-in on ranks other than 0).

    Raises:
        ImportError: mlflow is not installed.
        ValueError: The experiment does not exist and may not be created.
    """
    import os

    from engine._internal.worker_group.session import get_session

    session = get_session()
    context = session.context if session is not None else None
    if rank_zero_only and context is not None and context.get_world_rank() != 0:
        return _NoopModule()
    try:
        import mlflow
    except ImportError as exc:
        raise ImportError("setup_mlflow needs mlflow: pip install 'trainyard[tracking]'") \
            from exc
    if tracking_token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    if registry_uri:
        mlflow.set_registry_uri(registry_uri)
    exp_id = _experiment(mlflow, experiment_id, experiment_name, artifact_location,
                         create_experiment_if_not_exists)
    run_tags = dict(tags or {})
    if context is not None:
        run_tags.setdefault("trial_id", context.get_trial_id())
        run_tags.setdefault("trial_name", context.get_trial_name())
        run_name = run_name or context.get_trial_name()
    mlflow.start_run(experiment_id=exp_id, run_name=run_name, tags=run_tags)
    if config:
        from engine.callbacks.files import flatten

        mlflow.log_params(flatten(dict(config), skip=()))
    return mlflow


def _experiment(mlflow: Any, experiment_id: Optional[str], name: Optional[str],
                artifact_location: Optional[str], create: bool) -> Optional[str]:
    import os

    experiment_id = experiment_id or os.environ.get("MLFLOW_EXPERIMENT_ID")
    name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if experiment_id:
        if mlflow.get_experiment(experiment_id) is None:
            raise ValueError(f"setup_mlflow(experiment_id={experiment_id!r}): no such "
                             "MLflow experiment.")
        return experiment_id
    if not name:
        return None  # MLflow's default experiment
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    if not create:
        raise ValueError(f"setup_mlflow(experiment_name={name!r}): no such MLflow "
                         "experiment; pass create_experiment_if_not_exists=True.")
    return mlflow.create_experiment(name, artifact_location=artifact_location)
