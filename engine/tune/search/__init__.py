"""Search spaces and searchers (Ray Tune's ``ray.tune.search``).

A ``param_space`` is a (nested) dict whose leaves are constants, sampling domains
(``uniform(0, 1)``, ``choice([...])`` …) or ``grid_search([...])``. The default searcher
runs every combination of the grid ``num_samples`` times, drawing fresh random values for
the sampled leaves each time. The code lives at Ray's module paths (``sample``,
``variant_generator``, ``basic_variant``, ``optuna`` …); this package re-exports it.
"""

from __future__ import annotations

from engine.tune.search.basic_variant import BasicVariantGenerator
from engine.tune.search.concurrency_limiter import ConcurrencyLimiter
from engine.tune.search.repeater import Repeater
from engine.tune.search.sample import (GRID_KEY, Categorical, Domain, Float, Function, Integer,
                                       Normal, choice, grid_search, is_grid, lograndint,
                                       loguniform, qlograndint, qloguniform, qrandint, qrandn,
                                       quniform, randint, randn, sample_from, uniform)
from engine.tune.search.searcher import Searcher
from engine.tune.search.variant_generator import (Path, get_path, grid_combinations, leaves,
                                                  path_name, resolve, searchable_paths,
                                                  set_path)

__all__ = [
    "Domain", "Categorical", "Float", "Integer", "Normal", "Function", "choice", "uniform",
    "quniform", "loguniform", "qloguniform", "randint", "qrandint", "lograndint",
    "qlograndint", "randn", "qrandn", "sample_from", "grid_search", "Searcher",
    "BasicVariantGenerator", "ConcurrencyLimiter", "Repeater",
]
