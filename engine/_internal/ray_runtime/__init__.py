"""Every touch of Ray beyond its public API, in one package: starting or joining Ray
(``start``), this process's instance (``instance``), SIGTERM (``signals``), child
processes (``children``), Ray's log files (``logs``), the deferred autoscaler monitor
(``monitor``), patches of Ray's private ``Node`` for a local start (``node_patches``), the
exit (``shutdown``), notices kept quiet (``notices``) and the settings they read
(``settings``).

Each use of ``ray._private`` (or of a private attribute) asks
:func:`versions.written_for` first: outside the Ray versions it was checked against it
warns once and keeps Ray's own behaviour. Nothing outside this package touches
``ray._private``; ``tests/unit/engine/test_ray_local_start.py`` covers the guard.
"""
