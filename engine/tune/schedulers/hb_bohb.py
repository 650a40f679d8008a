"""HyperBand for BOHB (Ray Tune's ``ray.tune.schedulers.hb_bohb``): HyperBand's brackets,
each result annotated with its budget for :class:`~engine.tune.search.bohb.TuneBOHB`."""

from __future__ import annotations

from typing import Any, Dict

from engine.tune.schedulers.hyperband import Bracket, HyperBandScheduler


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand for BOHB (use with :class:`~engine.tune.search.bohb.TuneBOHB`): the
    same brackets; a trial at a milestone carries ``result["hyperband_info"]["budget"]``
    (the milestone) so that the searcher models results per budget."""

    def _annotate(self, result: Dict[str, Any], bracket: Bracket) -> None:
        result.setdefault("hyperband_info", {})["budget"] = bracket.r
