"""MLflow runs for trials: params, metrics per step, the final checkpoint as artifacts."""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any, Dict, List, Optional

from engine import constants
from engine._internal.execution.trial import Trial
from engine._internal.storage.filesystem import join
from engine.callbacks.base import LoggerCallback
from engine.callbacks.files import flatten, iteration_of
from engine.callbacks.tensorboard import numeric_scalars
from engine.checkpoint import Checkpoint

logger = logging.getLogger("engine")

_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value
_BATCH = 100  # MLflow's limit on params (and tags) per log_batch
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


class MLflowLoggerCallback(LoggerCallback):
    """Logs each trial as an MLflow run.

    The run is named after the trial and tagged with ``trial_id`` and ``trial_name`` (a
    resumed ``fit()`` continues the run with its ``trial_id``). Params are the trial's
    flattened config; every numeric metric is logged at step ``training_iteration``;
    with ``save_artifact=True`` the trial's final checkpoint is logged as artifacts under
    ``checkpoint/``. The run ends ``FINISHED``, or ``FAILED`` when the trial errored.

    Args:
        tracking_uri: Where MLflow stores runs (``sqlite:///path/mlflow.db``,
            ``file:///path/mlruns``, ``http://server:5000``). None uses MLflow's
            default (``$MLFLOW_TRACKING_URI``, else a store in the working directory).
        experiment_name: MLflow experiment, created if missing. None uses
            ``$MLFLOW_EXPERIMENT_NAME``, else MLflow's ``Default`` experiment.
        tags: Extra tags set on every run.
        save_artifact: Log the final checkpoint's files as run artifacts.
        artifact_location: Where a newly created experiment stores artifacts (MLflow's
            default is ``./mlruns`` under the working directory for a database store).

    Needs ``mlflow`` (``pip install 'trainyard[tracking]'``).
    """

    def __init__(self, tracking_uri: Optional[str] = None,
                 experiment_name: Optional[str] = None,
                 tags: Optional[Dict[str, Any]] = None, save_artifact: bool = False,
                 *, artifact_location: Optional[str] = None) -> None:
        try:
            import mlflow  # noqa: F401
        except ImportError as exc:
            raise ImportError("MLflowLoggerCallback needs mlflow: "
                              "pip install 'trainyard[tracking]'") from exc
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.tags = dict(tags or {})
        self.save_artifact = save_artifact
        self.artifact_location = artifact_location
        self._client: Any = None
        self._experiment_id: Optional[str] = None
        self._runs: Dict[str, str] = {}  # trial_id -> MLflow run id

    # --- hooks -------------------------------------------------------------------
    def log_trial_start(self, trial: Trial) -> None:
        self._run_id(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: Dict[str, Any]) -> None:
        from mlflow.entities import Metric

        run_id = self._run_id(trial)
        step = iteration_of(result)
        step = iteration if step is None else step
        now = int(time.time() * 1000)
        metrics = [Metric(_key(k), v, now, step) for k, v in numeric_scalars(result).items()]
        for i in range(0, len(metrics), 1000):
            self._client.log_batch(run_id, metrics=metrics[i:i + 1000])

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        run_id = self._runs.pop(trial.trial_id, None)
        if run_id is None:
            return
        try:
            if self.save_artifact:
                self._log_checkpoint(run_id, trial)
        finally:
            self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    # --- helpers -----------------------------------------------------------------
    def _setup(self) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not name:
            self._experiment_id = "0"  # MLflow's Default experiment
            return
        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            self._experiment_id = experiment.experiment_id
        else:
            self._experiment_id = self._client.create_experiment(
                name, artifact_location=self.artifact_location)

    def _run_id(self, trial: Trial) -> str:
        run_id = self._runs.get(trial.trial_id)
        if run_id is not None:
            return run_id
        if self._client is None:
            self._setup()
        run_id = self._find_run(trial.trial_id)
        if run_id is None:
            tags = {**{k: str(v) for k, v in self.tags.items()},
                    "trial_id": trial.trial_id, "trial_name": trial.trial_name}
            run_id = self._client.create_run(self._experiment_id, tags=tags,
                                             run_name=trial.trial_name).info.run_id
            self._log_params(run_id, trial)
        else:
            self._client.update_run(run_id, status="RUNNING")
        self._runs[trial.trial_id] = run_id
        return run_id

    def _find_run(self, trial_id: str) -> Optional[str]:
        runs = self._client.search_runs([self._experiment_id],
                                        filter_string=f"tags.trial_id = '{trial_id}'",
                                        max_results=1)
        return runs[0].info.run_id if runs else None

    def _log_params(self, run_id: str, trial: Trial) -> None:
        from mlflow.entities import Param

        params = [Param(_key(k), str(v)[:_MAX_PARAM_LEN])
                  for k, v in flatten(trial.config or {}, skip=()).items()]
        for i in range(0, len(params), _BATCH):
            self._client.log_batch(run_id, params=params[i:i + _BATCH])

    def _log_checkpoint(self, run_id: str, trial: Trial) -> None:
        ckpt = trial.checkpoint or _latest_committed(trial)
        if ckpt is None:
            logger.info("MLflowLoggerCallback(save_artifact=True): trial %s has no "
                        "checkpoint to log.", trial)
            return
        with ckpt.as_directory() as local_dir:
            for root, _dirs, files in os.walk(local_dir):
                rel = os.path.relpath(root, local_dir)
                dest = "checkpoint" if rel == "." else f"checkpoint/{rel}"
                for name in files:
                    if name != constants.COMMIT_MARKER:
                        self._client.log_artifact(run_id, os.path.join(root, name), dest)


def _key(name: str) -> str:
    return _KEY_CHARS.sub("_", name)[:250]


def _latest_committed(trial: Trial) -> Any:
    """The highest-numbered committed checkpoint in the trial directory, or None."""
    storage = trial.get_storage()
    names: List[str] = sorted(
        n for n in storage.list_dir(storage.root)
        if n.startswith(constants.CHECKPOINT_DIR_PREFIX)
        and storage.exists(join(storage.root, n, constants.COMMIT_MARKER)))
    if not names:
        return None
    return Checkpoint(join(storage.root, names[-1]), storage.fs)
