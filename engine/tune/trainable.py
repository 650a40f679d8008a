"""Ray Tune's class API: subclass :class:`Trainable`, implement ``setup`` and ``step``
(and ``save_checkpoint``/``load_checkpoint`` to checkpoint), and pass the class to a
``Tuner`` or ``tune.run`` as you would in Ray (``ray.tune.Trainable``).

    from engine import tune

    class Quadratic(tune.Trainable):
        def setup(self, config):
            self.x = 0.0
        def step(self):
            self.x += self.config["lr"]
            return {"loss": (self.x - 3) ** 2}
        def save_checkpoint(self, checkpoint_dir):
            return {"x": self.x}            # or write files into checkpoint_dir
        def load_checkpoint(self, checkpoint):
            self.x = checkpoint["x"]        # the dict, or the directory's path

    tune.Tuner(Quadratic, param_space={"lr": tune.uniform(0.1, 1)},
               run_config=tune.RunConfig(stop={"training_iteration": 10},
                                         checkpoint_config=tune.CheckpointConfig(
                                             checkpoint_frequency=2,
                                             checkpoint_at_end=True))).fit()

How it runs: a trial is one worker running a loop that calls :meth:`Trainable.train`
(``step`` and the automatic result fields) and reports each result as a function
trainable's ``tune.report`` would. Checkpoints are taken every
``CheckpointConfig.checkpoint_frequency`` iterations, when a result sets
``should_checkpoint``, and (``checkpoint_at_end``) at the trial's last iteration: a
result with ``done`` set, or one that meets a ``RunConfig(stop={...})`` dict. A trial
restored (a retry, ``Tuner.restore``, PBT's exploit, a HyperBand pause) is a new
instance, ``setup`` with the trial's config, then ``load_checkpoint``; the iteration
count and total time go on from the checkpoint. ``reset_config`` is therefore not
called (Ray calls it only to reuse an actor, ``reuse_actors=True``); a class that
defines it works unchanged.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Union

from engine.exceptions import ConfigError

#: The file holding the dict ``save_checkpoint`` returned (Ray's name for it).
DICT_CHECKPOINT_FILE = "_dict_checkpoint.pkl"
#: The trainable's counters, kept in each of its checkpoints.
STATE_FILE = ".tune_trainable_state.json"


class Trainable:
    """A trainable as a class (``ray.tune.Trainable``): override :meth:`setup`,
    :meth:`step`, and to checkpoint :meth:`save_checkpoint` / :meth:`load_checkpoint`;
    :meth:`cleanup` runs when the trial ends.

    Attributes:
        config: The trial's config (a copy is given to ``setup``).
        iteration / training_iteration: Results returned so far (restored ones count).
        trial_id, trial_name, logdir: The trial's, inside a Tuner (None outside).
    """

    def __init__(self, config: Optional[Dict[str, Any]] = None,
                 logger_creator: Optional[Callable] = None, storage: Any = None) -> None:
        self.config: Dict[str, Any] = dict(config or {})
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: Optional[int] = None
        self._episodes_total: Optional[int] = None
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._last_result: Optional[Dict[str, Any]] = None
        self._restored = False
        self._start_time = time.time()
        self.setup(copy.deepcopy(self.config))

    # --- what a subclass implements ---------------------------------------------------
    def setup(self, config: Dict[str, Any]) -> None:
        """Build what the trial needs (model, data) from ``config``."""

    def step(self) -> Dict[str, Any]:
        """One iteration of training; returns a dict of metrics (``done: True`` ends
        the trial)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(), which "
                                  "runs one iteration and returns a dict of metrics.")

    def save_checkpoint(self, checkpoint_dir: str) -> Optional[Dict[str, Any]]:
        """Write the state into ``checkpoint_dir`` (and return None), or return it as a
        dict (kept in the checkpoint; given back to :meth:`load_checkpoint`)."""
        raise NotImplementedError(
            f"{type(self).__name__} is asked to checkpoint (CheckpointConfig("
            "checkpoint_frequency / checkpoint_at_end), or a result's should_checkpoint) "
            "but does not implement save_checkpoint(checkpoint_dir).")

    def load_checkpoint(self, checkpoint: Union[Dict[str, Any], str]) -> None:
        """Restore the state: ``checkpoint`` is what :meth:`save_checkpoint` returned,
        or (it returned None) the path of the directory it wrote."""
        raise NotImplementedError(f"{type(self).__name__} has a checkpoint to restore "
                                  "but does not implement load_checkpoint(checkpoint).")

    def reset_config(self, new_config: Dict[str, Any]) -> bool:
        """Ray calls this to reuse an actor for a new config; trainyard starts a new
        instance instead (see the module's docstring). True when it reset."""
        return False

    def cleanup(self) -> None:
        """Release what ``setup`` took; called once when the trial ends."""

    @classmethod
    def default_resource_request(cls, config: Dict[str, Any]) -> Optional[Any]:
        """Resources a trial of this class needs: a dict like ``{"CPU": 2}`` (or
        None: one CPU, or what ``tune.with_resources`` gave)."""
        return None

    # --- what Ray's Trainable offers its callers ---------------------------------------
    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    def get_config(self) -> Dict[str, Any]:
        return self.config

    @property
    def trial_id(self) -> Optional[str]:
        return _context_value("get_trial_id")

    @property
    def trial_name(self) -> Optional[str]:
        return _context_value("get_trial_name")

    @property
    def logdir(self) -> Optional[str]:
        return _context_value("get_trial_dir")

    @property
    def trial_resources(self) -> Any:
        return _context_value("get_trial_resources")

    def train(self) -> Dict[str, Any]:
        """Run :meth:`step` once and return its result with Ray's automatic fields
        (``done``, ``training_iteration``, ``time_this_iter_s``, ``time_total_s``,
        ``timesteps_total``, ``episodes_total``, ``iterations_since_restore`` …)."""
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict of metrics, "
                            f"got {type(result).__name__}.")
        result = dict(result)
        self._iteration += 1
        self._iterations_since_restore += 1
        took = result.get("time_this_iter_s")
        took = time.time() - start if took is None else float(took)
        self._time_total += took
        self._time_since_restore += took
        result.setdefault("done", False)
        if result.get("timesteps_this_iter") is not None:
            self._timesteps_total = (self._timesteps_total or 0) + result["timesteps_this_iter"]
            self._timesteps_since_restore += result["timesteps_this_iter"]
        if result.get("episodes_this_iter") is not None:
            self._episodes_total = (self._episodes_total or 0) + result["episodes_this_iter"]
        result.setdefault("timesteps_total", self._timesteps_total)
        result.setdefault("episodes_total", self._episodes_total)
        result.update(training_iteration=self._iteration, time_this_iter_s=took,
                      time_total_s=self._time_total,
                      time_since_restore=self._time_since_restore,
                      iterations_since_restore=self._iterations_since_restore)
        if self._timesteps_since_restore:
            result["timesteps_since_restore"] = self._timesteps_since_restore
        self._last_result = result
        return result

    def save(self, checkpoint_dir: Optional[str] = None) -> str:
        """Checkpoint into ``checkpoint_dir`` (default: a new temporary directory) and
        return its path: :meth:`save_checkpoint`'s files or dict, and the counters."""
        directory = checkpoint_dir or tempfile.mkdtemp(prefix="trainable_ckpt_")
        os.makedirs(directory, exist_ok=True)
        data = self.save_checkpoint(directory)
        if isinstance(data, (str, os.PathLike)) and _inside(os.fspath(data), directory):
            data = None  # its own checkpoint_dir, or a file in it (as Ray takes it)
        if data is not None:
            if not isinstance(data, dict):
                raise TypeError(f"{type(self).__name__}.save_checkpoint() must return None, "
                                "a dict, or a path inside checkpoint_dir; got "
                                f"{data!r}.")
            with open(os.path.join(directory, DICT_CHECKPOINT_FILE), "wb") as f:
                pickle.dump(data, f)
        with open(os.path.join(directory, STATE_FILE), "w") as f:
            json.dump({"iteration": self._iteration, "time_total": self._time_total,
                       "timesteps_total": self._timesteps_total,
                       "episodes_total": self._episodes_total}, f)
        return directory

    def restore(self, checkpoint: Any) -> None:
        """Load a checkpoint :meth:`save` wrote (a path or an ``engine.Checkpoint``):
        :meth:`load_checkpoint`, and the counters go on from it."""
        if hasattr(checkpoint, "as_directory"):
            with checkpoint.as_directory() as directory:
                return self.restore(directory)
        directory = os.fspath(checkpoint)
        state_path = os.path.join(directory, STATE_FILE)
        if os.path.exists(state_path):
            with open(state_path) as f:
                state = json.load(f)
            self._iteration = int(state.get("iteration", 0))
            self._time_total = float(state.get("time_total", 0.0))
            self._timesteps_total = state.get("timesteps_total")
            self._episodes_total = state.get("episodes_total")
        dict_path = os.path.join(directory, DICT_CHECKPOINT_FILE)
        if os.path.exists(dict_path):
            with open(dict_path, "rb") as f:
                self.load_checkpoint(pickle.load(f))
        else:
            self.load_checkpoint(directory)
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._restored = True

    def stop(self) -> None:
        """End the trainable: :meth:`cleanup`."""
        self.cleanup()

    def reset(self, new_config: Dict[str, Any]) -> bool:
        """Ray's reuse of an actor for ``new_config``: :meth:`reset_config`, and the
        counters start over when it returns True."""
        if not self.reset_config(new_config):
            return False
        self.config = dict(new_config)
        self._iteration, self._time_total = 0, 0.0
        self._timesteps_total = self._episodes_total = None
        self._iterations_since_restore, self._time_since_restore = 0, 0.0
        return True


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory + os.sep)


def _context_value(method: str) -> Any:
    from engine.tune._context import get_context

    return getattr(get_context(), method)()


def is_trainable_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Trainable)


def class_train_func(cls: type, checkpoint_frequency: int, checkpoint_at_end: bool,
                     stop: Any) -> Callable[[Dict[str, Any]], None]:
    """The function trainable that runs ``cls``: a new instance per trial (or restart),
    restored from the trial's checkpoint, stepped and reported until it is done."""
    if isinstance(checkpoint_frequency, bool) or not isinstance(checkpoint_frequency, int) \
            or checkpoint_frequency < 0:
        raise ConfigError(f"CheckpointConfig(checkpoint_frequency={checkpoint_frequency!r}) "
                          "is invalid: use 0 (off) or a positive number of iterations.")
    limits = dict(stop) if isinstance(stop, dict) else {}

    def train_class_trainable(config: Dict[str, Any]) -> None:
        from engine.checkpoint import Checkpoint
        from engine.session import get_checkpoint, report

        trainable = cls(config=config)
        try:
            restored = get_checkpoint()
            if restored is not None:
                trainable.restore(restored)
            while True:
                result = trainable.train()
                last = bool(result.get("done")) or _meets(result, limits)
                wanted = bool(result.pop("should_checkpoint", False)) or (
                    checkpoint_frequency and trainable.iteration % checkpoint_frequency == 0
                ) or (last and checkpoint_at_end)
                if wanted:
                    directory = trainable.save(tempfile.mkdtemp(prefix="trainable_ckpt_"))
                    try:
                        report(result, checkpoint=Checkpoint.from_directory(directory))
                    finally:
                        shutil.rmtree(directory, ignore_errors=True)
                else:
                    report(result)
                if last:  # done, or the stop dict is met: end here, cleanup() now
                    return
        finally:
            trainable.stop()

    train_class_trainable.__name__ = cls.__name__
    train_class_trainable.__qualname__ = cls.__qualname__
    return train_class_trainable


def _meets(result: Dict[str, Any], limits: Dict[str, Any]) -> bool:
    """Whether ``result`` meets a ``RunConfig(stop={...})`` dict (any metric at or past
    its value), so this is the trial's last iteration."""
    for key, value in limits.items():
        got = result
        for part in key.split("/"):
            got = got.get(part) if isinstance(got, dict) else None
        if isinstance(got, (int, float)) and got >= value:
            return True
    return False


__all__ = ["Trainable"]
