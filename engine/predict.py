"""Prediction from checkpoints: one batch in process, a whole dataset on Ray actors.

    from engine.predict import BatchPredictor, evaluate
    from engine.torch import TorchPredictor

    predictor = TorchPredictor.from_checkpoint(result.checkpoint, model=build_model())
    predictor.predict(df)                       # a DataFrame with a "predictions" column
    scores = BatchPredictor.from_checkpoint(result.checkpoint, TorchPredictor,
                                            model=build_model()).predict(
        "s3://bucket/features/", batch_size=4096, num_workers=2, keep_columns=["id"],
        output_uri="s3://bucket/scores/")    # a ray.data.Dataset, also written as Parquet
    metrics = evaluate(result.checkpoint, val_df, model=build_model())

A checkpoint a trainer wrote carries a ``model_card.json`` (framework, feature and label
columns …) and the fitted preprocessor: prediction applies the preprocessor first and
takes its feature columns from the card, so it needs no out-of-band knowledge. Loading a
checkpoint may unpickle it (dict checkpoints, custom preprocessors): trusted ones only.
"""

from __future__ import annotations

from engine._internal.data.batch_predictor import BatchPredictor
from engine.evaluate import evaluate
from engine.exceptions import FrameworkMismatchError, MissingColumnsError
from engine.predictor import (DEFAULT_BATCH_SIZE, Predictor, get_predictor_class,
                              register_predictor, required_columns)

__all__ = ["Predictor", "BatchPredictor", "evaluate", "register_predictor",
           "get_predictor_class", "required_columns", "MissingColumnsError",
           "FrameworkMismatchError", "DEFAULT_BATCH_SIZE"]
