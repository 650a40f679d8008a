"""Search-space domains and sampling helpers (Ray Tune's ``ray.tune.search.sample``)."""

from __future__ import annotations

from engine.tune.search import (Categorical, Domain, Float, Function, Integer, Normal,
                                choice, grid_search, lograndint, loguniform, qlograndint,
                                qloguniform, qrandint, qrandn, quniform, randint, randn,
                                sample_from, uniform)

__all__ = ["Domain", "Categorical", "Float", "Integer", "Normal", "Function", "choice",
           "uniform", "quniform", "loguniform", "qloguniform", "randint", "qrandint",
           "lograndint", "qlograndint", "randn", "qrandn", "sample_from", "grid_search"]
