"""scikit-learn: ``SklearnTrainer`` (one worker, joblib parallelism from its CPUs) and
``SklearnPredictor``.

Importing this package does not import scikit-learn; fitting or predicting does
(``pip install 'trainyard[sklearn]'``).
"""

from __future__ import annotations

from engine.sklearn.checkpoint import SklearnCheckpoint
from engine.sklearn.predictor import SklearnPredictor
from engine.sklearn.trainer import SklearnTrainer

__all__ = ["SklearnTrainer", "SklearnPredictor", "SklearnCheckpoint"]
