"""Side-by-side benchmarks: trainyard against its anchors (Ray Train, torchrun, ...).

``python -m bench.run [--quick] [--only NAME ...] [--reps N] [--out DIR]`` runs every
registered workload on trainyard ("ours") and on its anchor, alternating, and writes
``bench/results/latest.json`` plus a Markdown table. The anchors are the real packages
installed in this environment, never recorded numbers.

A workload is one module that builds a :class:`bench.core.Workload` and passes it to
:func:`bench.core.register`; list the module in ``bench.run.WORKLOAD_MODULES``.
"""
