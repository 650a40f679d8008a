"""The default searcher (Ray Tune's ``ray.tune.search.basic_variant``)."""

from __future__ import annotations

from engine.tune.search import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]
