"""What the controller is handed: a run, fully described (``RunSpec``, from a trainer),
and a tuner's decisions about a running trial (``TrialDecision``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from engine._internal.worker_group.backend import BackendConfig
from engine.checkpoint import Checkpoint
from engine.config import DataConfig, RunConfig, ScalingConfig


@dataclass
class RunSpec:
    """Everything a trainer hands the controller."""

    train_func: Callable
    train_loop_config: Optional[Dict[str, Any]]
    scaling_config: ScalingConfig
    run_config: RunConfig
    backend_config: BackendConfig
    trainer_name: str = "Trainer"
    datasets: Dict[str, Any] = field(default_factory=dict)
    data_config: DataConfig = field(default_factory=DataConfig)
    resume_from_checkpoint: Optional[Checkpoint] = None
    worker_env: Dict[str, str] = field(default_factory=dict)
    trial_info: Dict[str, Any] = field(default_factory=dict)
    # Saved into every committed checkpoint, so prediction needs nothing else.
    preprocessor: Any = None
    model_card: Dict[str, Any] = field(default_factory=dict)
    # A Tuner's paused trial that resumes from another trial's checkpoint (synchronous
    # PBT): adopted as this run's latest when the run (re)starts, then cleared.
    adopt_checkpoint: Optional[Checkpoint] = None
    # The training function reads its shards only through gbdt.data.read_shard (a tree
    # trainer's built-in loop): local Parquet files may then be read by each worker
    # itself instead of through Ray Data (data.make_shards).
    read_files_directly: bool = False
    # What the run's datasets were, by name (a path, a DataFrame's content hash, or
    # only the kind), kept in the run record: a run is its config (``same_run``).
    dataset_identity: Dict[str, str] = field(default_factory=dict)
    # Trainer.restore(path): the user chose to continue the stored run (and may have
    # given its config again, as Ray allows), so no check against the stored config.
    continues_stored_run: bool = False


class TrialAction(enum.Enum):
    """What a tuner tells a running trial (``Controller(decide=...)``)."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"        # early stopping: the run ends now as FINISHED (done=True)
    PAUSE = "PAUSE"      # the tuning loop was interrupted: end now, stay resumable
    RESTART = "RESTART"  # PBT's exploit: adopt `checkpoint`, restart with `config`


@dataclass
class TrialDecision:
    """``checkpoint``: a local copy (without commit marker) adopted as this run's latest
    checkpoint before restarting; ``trial_info`` updates ``RunSpec.trial_info``."""

    action: TrialAction
    config: Optional[Dict[str, Any]] = None
    checkpoint: Optional[Checkpoint] = None
    trial_info: Optional[Dict[str, Any]] = None
    # A RESTART that is applied only once the round is known not to be the run's last
    # (PBT never exploits a trial at its final report): ``prepare()`` then returns the
    # decision to apply (None: go on unchanged); ``cancel()`` when it was the last.
    prepare: Optional[Callable[[], Optional["TrialDecision"]]] = None
    cancel: Optional[Callable[[], None]] = None
