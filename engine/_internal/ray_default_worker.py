"""The entry point of the engine's local Ray's worker processes: Ray's own
``default_worker.py``, with Python's garbage collector off while the worker imports Ray.

A worker process spends most of its start importing Ray (0.55–0.75 CPU-s on the 2-core
development VM), and a fifth of that was the cyclic garbage collector walking the
heap that the import is building (gen-0 collections every 700 allocations, of objects
that live as long as the process): with it off, the same import took 0.54–0.58 CPU-s
instead of 0.67–0.75, and a fit's worker reached ``train_func`` with 0.64–0.71 CPU-s
used instead of 0.81–0.95. A test run or a pipeline starts thousands of these. The
collector is back on before the worker takes its first task (``Worker.main_loop``);
everything else is Ray's: same arguments, same ``sys.path[0]``, same ``__main__``.

Used only by a local instance the engine starts (``ensure_ray``); a cluster's workers
are the cluster's. ``TRAINYARD_RAY_FAST_WORKER_START=0`` starts them as Ray does.
"""

import os  # both already loaded by the interpreter's start: no search of sys.path
import sys

# This file's directory (engine/_internal) must not shadow other modules. (Under -P or
# PYTHONSAFEPATH Python does not put it there.)
if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]

import gc  # noqa: E402

gc.disable()

import runpy  # noqa: E402

import ray._private.worker as _worker  # noqa: E402
import ray._private.workers.default_worker as _default_worker  # noqa: E402

_main_loop = _worker.Worker.main_loop


def _main_loop_collecting(self):
    gc.enable()
    return _main_loop(self)


_worker.Worker.main_loop = _main_loop_collecting
_path = _default_worker.__file__
sys.argv[0] = _path
sys.path.insert(0, os.path.dirname(_path))
runpy.run_path(_path, run_name="__main__")
