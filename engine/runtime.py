"""The engine's Ray runtime, for scripts that want Ray up before their first ``fit()``.

``fit()``, ``Tuner.fit()`` and the batch predictor start (or join) Ray by themselves.
Call :func:`ensure_ray` first only to do that step apart, with the settings the engine
would use: to time it, or to build Ray datasets before the trainer. It joins the
cluster in ``RAY_ADDRESS`` when set; otherwise it starts a local instance with at least
``engine.constants.DEFAULT_MIN_RAY_NUM_CPUS`` logical CPUs (``TRAINYARD_RAY_NUM_CPUS``
overrides), so that Ray Data tasks have room beside the training workers. A second
call does nothing.

``ensure_ray(background=True)`` starts it in a thread and returns at once: put it at
the top of a script, before the framework's imports, and the seconds Ray's local start
takes pass while the script imports and prepares its inputs; ``fit()`` waits for the
start (and raises its error, if it failed). The pipeline steps (``tasks.train``,
``tasks.tune``) do this themselves.

Example::

    from engine.runtime import ensure_ray

    ensure_ray(background=True)
    import torch  # imports while Ray starts
    ...
    trainer.fit()  # waits for Ray's start if it is still running
"""

from __future__ import annotations

from engine._internal.ray_runtime.start import ensure_ray

__all__ = ["ensure_ray"]
