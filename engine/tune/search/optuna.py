"""``engine.tune.search.optuna.OptunaSearch`` (Ray Tune's ``ray.tune.search.optuna``).
Optuna itself is imported only when the searcher is set up."""

from __future__ import annotations

from engine.tune.optuna_search import OptunaSearch

__all__ = ["OptunaSearch"]
