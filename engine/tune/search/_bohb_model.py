"""BOHB's model (Falkner et al., 2018, as hpbandster's config generator): kernel density
estimates of good and bad configs per budget, in ConfigSpace's vector representation
(numeric values scaled to [0, 1], categories as indices)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


class _KDE:
    """A product kernel density: Gaussian for numeric dimensions, Aitchison-Aitken for
    categorical ones (``kinds[d]``: 0 numeric, else the number of categories)."""

    def __init__(self, data: np.ndarray, kinds: List[int], min_bandwidth: float) -> None:
        self.data, self.kinds = data, kinds
        n = data.shape[0]
        bw = 1.06 * np.std(data, axis=0) * n ** (-1 / 5)
        caps = np.array([1.0 if k == 0 else (k - 1) / k for k in kinds])
        self.bw = np.clip(bw, min_bandwidth, np.maximum(caps, min_bandwidth))

    def pdf(self, x: np.ndarray) -> float:
        dens = np.ones(self.data.shape[0])
        for d, k in enumerate(self.kinds):
            col, bw = self.data[:, d], self.bw[d]
            if k == 0:
                dens *= np.exp(-0.5 * ((x[d] - col) / bw) ** 2) / (bw * math.sqrt(2 * math.pi))
            else:
                dens *= np.where(col == x[d], 1 - bw, bw / max(k - 1, 1))
        return float(dens.mean())


class KDEModel:
    """Results per budget and the good/bad densities of the largest modelled budget."""

    def __init__(self, cs: Any, seed: Optional[int] = None,
                 min_points_in_model: Optional[int] = None, top_n_percent: float = 15,
                 num_samples: int = 64, random_fraction: float = 1 / 3,
                 bandwidth_factor: float = 3, min_bandwidth: float = 1e-3) -> None:
        self.cs = cs
        hps = list(cs.values())
        self.kinds = [len(h.choices) if hasattr(h, "choices") else
                      (len(h.sequence) if hasattr(h, "sequence") else 0) for h in hps]
        self.min_points = min_points_in_model or len(hps) + 1
        self.top_n_percent, self.num_samples = top_n_percent, num_samples
        self.random_fraction, self.bandwidth_factor = random_fraction, bandwidth_factor
        self.min_bandwidth = min_bandwidth
        self.rng = np.random.default_rng(seed)
        self.results: Dict[float, List[Tuple[np.ndarray, float]]] = {}
        self.models: Dict[float, Tuple[_KDE, _KDE]] = {}

    def add(self, config: Any, budget: float, loss: float) -> None:
        """A result (smaller loss is better) of ``config`` at ``budget``."""
        self.results.setdefault(budget, []).append((np.asarray(config.get_array()), loss))
        self._fit(budget)

    def _fit(self, budget: float) -> None:
        rows = self.results[budget]
        n, d = len(rows), len(self.kinds)
        if n < self.min_points:
            return
        order = np.argsort([loss for _, loss in rows])
        data = np.nan_to_num(np.stack([v for v, _ in rows]), nan=0.5)[order]
        n_good = max(self.min_points, int(self.top_n_percent * n) // 100)
        n_bad = max(self.min_points, int((100 - self.top_n_percent) * n) // 100)
        good, bad = data[:n_good], data[n_good:n_good + n_bad]
        if good.shape[0] <= d or bad.shape[0] <= d:
            return  # too few to estimate a density in d dimensions
        self.models[budget] = (_KDE(good, self.kinds, self.min_bandwidth),
                               _KDE(bad, self.kinds, self.min_bandwidth))

    def get_config(self) -> Any:
        """A model-based config, or a random one (at first, and ``random_fraction``)."""
        if not self.models or self.rng.random() < self.random_fraction:
            return self.cs.sample_configuration()
        good, bad = self.models[max(self.models)]
        best, best_score = None, -math.inf
        for _ in range(self.num_samples):
            x = self._around(good.data[self.rng.integers(len(good.data))], good.bw)
            score = good.pdf(x) / max(bad.pdf(x), 1e-32)
            if score > best_score:
                best, best_score = x, score
        return self._configuration(best)

    def _around(self, center: np.ndarray, bws: np.ndarray) -> np.ndarray:
        x = np.empty_like(center, dtype=float)
        for d, k in enumerate(self.kinds):
            bw = bws[d]
            if k == 0:
                x[d] = float(np.clip(self.rng.normal(center[d], bw * self.bandwidth_factor),
                                     0.0, 1.0))
            elif self.rng.random() < 1 - bw:
                x[d] = center[d]
            else:
                x[d] = self.rng.integers(k)
        return x

    def _configuration(self, vector: Any) -> Any:
        import ConfigSpace

        values = {}
        for value, hp in zip(vector, self.cs.values()):
            v = hp.to_value(np.array([value]))[0] if not hasattr(hp, "choices") \
                else hp.choices[int(value)]
            values[hp.name] = v.item() if hasattr(v, "item") else v
        return ConfigSpace.Configuration(self.cs, values=values)
