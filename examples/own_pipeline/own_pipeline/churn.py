"""Customer churn, two ways: gradient-boosted trees (XGBoost) and a small torch network.

Both train on ``data/churn.csv`` (shipped with the package: 400 customers, 4 numeric
columns, ``churned`` 0/1) unless given another source. trainyard finds them through the
entry points in ``pyproject.toml``:

    churn_xgboost = "own_pipeline.churn:XGBOOST"
    churn_torch = "own_pipeline.churn:TORCH"

Importing this module imports no framework: torch loads in the train function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from engine.preprocessors import StandardScaler
from pipelines import PipelineSpec

DATA = str(Path(__file__).resolve().parent / "data" / "churn.csv")
FEATURES = 4  # tenure_months, monthly_charges, support_calls, contract_months

# The short form: a framework and its parameters; trainyard's XGBoostTrainer does the
# rest (data-parallel boosting, a checkpoint every 5 rounds, validation-logloss).
XGBOOST = PipelineSpec(
    name="churn_xgboost",
    description="Customer churn: XGBoost trees on the team's CSV",
    framework="xgboost", source=DATA, label_column="churned",
    params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
    defaults={"max_depth": 3, "eta": 0.2, "num_boost_round": 30, "seed": 0},
    param_space={"max_depth": {"grid_search": [2, 4]}},
    gate={"accuracy": ">=0.7"},
)


def build_model(config: Dict[str, Any]) -> Any:
    import torch.nn as nn

    hidden = int(config.get("hidden", 16))
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def train_func(config: Dict[str, Any], data: Any) -> None:
    """Each worker: its share of the (standardised) training rows, DDP, a checkpoint and
    the validation metrics every epoch; resumes from the latest checkpoint on a retry."""
    import torch

    import engine
    from engine.torch import prepare_model

    X, y = (torch.from_numpy(a) for a in data.arrays("train", shard=True))
    X_val, y_val = (torch.from_numpy(a) for a in data.arrays("validation"))
    model, start = build_model(config), 0
    if engine.get_checkpoint() is not None:
        state = engine.get_checkpoint().to_dict()
        model.load_state_dict(state["model_weights"])
        start = state["epoch"] + 1
    model = prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(config.get("lr", 0.02)))
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = int(config.get("batch_size", 32))
    for epoch in range(start, int(config["epochs"])):
        model.train()
        for i in range(0, len(X), batch):
            optimizer.zero_grad()
            loss = loss_fn(model(X[i:i + batch]), y[i:i + batch])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(X_val)
            metrics = {"epoch": epoch, "val_loss": loss_fn(logits, y_val).item(),
                       "val_accuracy": (logits.argmax(1) == y_val).float().mean().item()}
        ckpt = None
        if engine.get_context().get_world_rank() == 0:
            ckpt = engine.Checkpoint.from_dict(
                {"epoch": epoch, "model_weights": getattr(model, "module", model).state_dict()})
        engine.report(metrics, checkpoint=ckpt)


# A train function and the network to load its weights into; the features are
# standardised by a preprocessor fitted on the training split and kept in every
# checkpoint, so prediction applies it too.
TORCH = PipelineSpec(
    name="churn_torch",
    description="Customer churn: a small torch network (DDP) on the team's CSV",
    framework="torch", source=DATA, label_column="churned",
    train_func=train_func, model=build_model, preprocessor=StandardScaler,
    defaults={"lr": 0.02, "hidden": 16, "batch_size": 32, "epochs": 8},
    param_space={"lr": {"grid_search": [0.01, 0.03]}},
    gate={"accuracy": ">=0.6"},
)
