"""Worker side of reuse: what a worker process undoes before it serves another fit or
trial (``engine.reuse_workers()``, ``TuneConfig(reuse_actors=True)``).

The actor takes a snapshot when it starts (:func:`snapshot`); :func:`reset_process`
then brings the process back to it, as far as a fresh process would differ in a way a
user can see:

- collectives torn down: torch's process group (and rank 0's store), Horovod
  (``hvd.shutdown()``), XGBoost's tracker and communicator, LightGBM's network;
  TensorFlow's collective server cannot be stopped in-process, so it stays up and the
  next TensorFlow fit of the same group reuses it (``engine.tensorflow.config``);
- framework state: Keras' session, TensorFlow's global seed and eager mode, Accelerate's
  process state, torch's RNG (reseeded from the OS, as at start-up), default dtype,
  deterministic mode and thread count, Python's and NumPy's global RNGs;
- the user's modules imported during the fit (not the standard library, installed
  packages or the engine) dropped from ``sys.modules``, so the next fit imports them
  afresh, and their garbage collected;
- environment variables and the working directory as they were at start.

scikit-learn needs nothing: its ``set_config`` is per thread, and every fit runs in a
thread of its own. Frameworks are looked up in ``sys.modules``: none is imported here.
"""

from __future__ import annotations

import gc
import logging
import os
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

logger = logging.getLogger("engine")


@dataclass
class _Snapshot:
    env: Dict[str, str]
    cwd: str
    modules: Set[str] = field(default_factory=set)


_snapshot: Optional[_Snapshot] = None


def snapshot() -> None:
    """Remember the environment, working directory and loaded modules (at actor start)."""
    global _snapshot
    _snapshot = _Snapshot(env=dict(os.environ), cwd=os.getcwd(), modules=set(sys.modules))


def reset_process() -> Optional[str]:
    """Undo what the last fit left in this process; None when it is clean, else why it
    is not (the pool then stops the worker instead of reusing it).

    Outside an actor (no snapshot) only the collectives are torn down."""
    steps = _COLLECTIVES + (_PROCESS_STATE if _snapshot is not None else ()) + (_lightgbm,)
    for step in steps:
        try:
            why = step()
        except Exception as exc:  # noqa: BLE001 - a worker that cannot be reset is stopped
            why = f"{step.__name__.lstrip('_')}: {type(exc).__name__}: {exc}"
        if why:
            logger.info("Worker %d is not reused: %s", os.getpid(), why)
            return why
    return None


# --- collectives ------------------------------------------------------------------------
def _torch_process_group() -> Optional[str]:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    dist.destroy_process_group()
    torch_config = sys.modules.get("engine.torch.config")
    if torch_config is not None:
        torch_config.release_store()
    return "torch's process group is still initialized" if dist.is_initialized() else None


_HOROVOD_MODULES = ("horovod.torch", "horovod.tensorflow", "horovod.keras",
                    "horovod.tensorflow.keras", "horovod.mxnet")


def _horovod() -> Optional[str]:
    # Each framework binding loads its own copy of Horovod's library, with its own state.
    for name in _HOROVOD_MODULES:
        hvd = sys.modules.get(name)
        if hvd is None or not hasattr(hvd, "is_initialized"):
            continue
        if hvd.is_initialized():
            hvd.shutdown()
        if hvd.is_initialized():
            return f"{name} is still initialized after hvd.shutdown()"
    return None


def _xgboost() -> Optional[str]:
    xgb_config = sys.modules.get("engine.xgboost.config")
    if xgb_config is not None:
        xgb_config.free_tracker()  # rank 0's, if its backend's shutdown missed it
    collective = sys.modules.get("xgboost.collective")
    if collective is not None and collective.is_distributed():
        collective.finalize()  # train_func left CommunicatorContext without closing it
        if collective.is_distributed():
            return "XGBoost's communicator is still initialized"
    return None


def _gbdt_params() -> Optional[str]:
    gbdt_config = sys.modules.get("engine._internal.gbdt.config")
    if gbdt_config is not None:
        gbdt_config.clear_worker_params()  # the last fit's collective addresses
    return None


def _lightgbm() -> Optional[str]:
    basic = sys.modules.get("lightgbm.basic")
    if basic is not None:
        # Process-wide; the last fit's boosters were collected first (_user_modules), so
        # none frees it later, in the middle of the next fit's training.
        basic._safe_call(basic._LIB.LGBM_NetworkFree())
    return None


# --- framework and process state ---------------------------------------------------------
def _tensorflow() -> Optional[str]:
    for name in ("tf_keras", "keras"):
        keras = sys.modules.get(name)
        backend = getattr(keras, "backend", None) if keras is not None else None
        if backend is not None and hasattr(backend, "clear_session"):
            backend.clear_session()
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "random"):
        tf.random.set_seed(None)
        tf.config.run_functions_eagerly(False)
    tf_config = sys.modules.get("engine.tensorflow.config")
    return tf_config.reuse_problem() if tf_config is not None else None


def _accelerate() -> Optional[str]:
    state = sys.modules.get("accelerate.state")
    if state is not None:
        # Its singletons would hand the next Accelerator() this fit's process group.
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()
    return None


def _torch_state() -> Optional[str]:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "seed"):
        return None
    torch.seed()  # a fresh process seeds its generator from the OS as well
    torch.set_default_dtype(torch.float32)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)
    torch.use_deterministic_algorithms(False)
    cudnn = sys.modules.get("torch.backends.cudnn")
    if cudnn is not None:
        cudnn.deterministic, cudnn.benchmark = False, False
    threads = _snapshot.env.get("OMP_NUM_THREADS", "") if _snapshot else ""
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))  # what torch chose at import under Ray
    return None


def _python_rngs() -> Optional[str]:
    import random

    random.seed()  # from the OS, as at start-up
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    return None


def _env_and_cwd() -> Optional[str]:
    assert _snapshot is not None
    for key in set(os.environ) - set(_snapshot.env):
        del os.environ[key]
    for key, value in _snapshot.env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    os.chdir(_snapshot.cwd)
    return None


# --- the user's modules ------------------------------------------------------------------
def _user_modules() -> Optional[str]:
    assert _snapshot is not None
    kept = _kept_roots()
    for name in [n for n in list(sys.modules) if n not in _snapshot.modules]:
        module = sys.modules.get(name)
        if module is not None and _is_user_module(module, kept):
            del sys.modules[name]
    gc.collect()  # their objects' finalizers (a LightGBM booster's) run now, not mid-fit
    return None


def _kept_roots() -> List[str]:
    """Folders whose modules stay loaded: the standard library, installed packages and
    the engine (re-importing C extensions such as NumPy's is not possible)."""
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    roots += list(getattr(site, "getsitepackages", lambda: [])())
    roots.append(site.getusersitepackages())
    # The engine's own package: its modules hold state that must outlive a fit (the
    # TensorFlow backend's count of fits, from which each strategy's collective keys
    # are drawn). Taken from the package, not from this file's depth in it.
    roots.append(os.path.dirname(os.path.abspath(sys.modules["engine"].__file__)))
    return [os.path.join(os.path.realpath(r), "") for r in roots if r]


def _is_user_module(module: object, kept: List[str]) -> bool:
    file = getattr(module, "__file__", None)
    paths = [file] if file else list(getattr(module, "__path__", None) or [])
    if not paths:
        return False  # built in, frozen or made at runtime: nothing to import again
    for path in paths:
        real = os.path.realpath(path)
        parts = real.split(os.sep)
        if real.endswith((".so", ".pyd")) or "site-packages" in parts \
                or "dist-packages" in parts or any(real.startswith(r) for r in kept):
            return False
    return True


# LightGBM's network is freed last, once the user's modules (and the boosters they held)
# were collected: a booster frees the process-wide network when it is collected.
_COLLECTIVES = (_torch_process_group, _horovod, _xgboost, _gbdt_params)
_PROCESS_STATE = (_user_modules, _tensorflow, _accelerate, _torch_state, _python_rngs,
                  _env_and_cwd)
