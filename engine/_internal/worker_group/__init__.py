"""The worker actors: the group gang-scheduled in one placement group, the loop each actor
runs, the pool that reuses actors across fits and trials, the reset between fits, and what
lives in a worker's process (the session ``report()`` acts on, captured output, metrics
across ranks).

``backend`` (the ``Backend`` interface frameworks implement) is here because every hook
it has runs on the group's processes (process group, ``TF_CONFIG``, rendezvous);
``metrics`` reduces what the workers reported, rank by rank.
"""
