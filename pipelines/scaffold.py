"""``trainyard new-pipeline``: write a small installable package holding one pipeline.

    <dir>/pyproject.toml           the distribution, with the trainyard.pipelines entry point
    <dir>/<name>_pipeline/pipeline.py    the PipelineSpec (a train function or parameters)
    <dir>/<name>_pipeline/data/sample.csv    a small data set: the default source
    <dir>/tests/test_pipeline.py   trains it one epoch/round through tasks.train
    <dir>/README.md                how to run it: CLI, Prefect flow, Airflow DAG

The package works before it is installed (``pytest`` in ``<dir>``) and, once
``pip install -e <dir>`` registers the entry point, everywhere trainyard runs.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from string import Template
from typing import Dict

from engine.exceptions import ConfigError

FRAMEWORKS = ("torch", "xgboost", "lightgbm", "sklearn", "tensorflow")
SAMPLE_ROWS = 240
SAMPLE_FEATURES = 4
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def write_scaffold(name: str, framework: str, directory: str | None = None) -> Path:
    """Write the package of a new pipeline.

    Args:
        name: The pipeline's name: lower-case letters, digits and ``_``, starting with a
            letter (it is also part of the Python package's name).
        framework: One of :data:`FRAMEWORKS`.
        directory: The project directory to create (default ``./<name>-pipeline``); it
            must not exist, or be empty.

    Returns:
        The project directory.

    Raises:
        ConfigError: a bad name or framework, or a directory that holds files.
    """
    if not _NAME.match(name or ""):
        raise ConfigError(f"Pipeline name {name!r}: use lower-case letters, digits and '_', "
                          "starting with a letter (e.g. churn_model).")
    if framework not in FRAMEWORKS:
        raise ConfigError(f"--framework {framework!r}: use one of {list(FRAMEWORKS)}.")
    root = Path(directory or f"{name.replace('_', '-')}-pipeline").expanduser().resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(f"{root} exists and is not an empty directory: choose another "
                          "--dir.")
    for rel, text in files(name, framework).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    write_sample(root / package_name(name) / "data" / "sample.csv")
    return root


def package_name(name: str) -> str:
    return f"{name}_pipeline"


def distribution_name(name: str) -> str:
    return f"{name.replace('_', '-')}-pipeline"


def files(name: str, framework: str) -> Dict[str, str]:
    """Relative path → text of every generated file but the sample data."""
    pkg = package_name(name)
    values = {"name": name, "pkg": pkg, "dist": distribution_name(name),
              "framework": framework, "features": str(SAMPLE_FEATURES),
              "epochs_note": ("" if framework == "sklearn" else
                              " --epochs 5")}
    fill = lambda template: Template(template).substitute(values)  # noqa: E731
    return {
        "pyproject.toml": fill(PYPROJECT),
        "README.md": fill(README),
        f"{pkg}/__init__.py": fill(PACKAGE_INIT),
        f"{pkg}/pipeline.py": fill(SPEC_HEAD + SPECS[framework]),
        "tests/test_pipeline.py": fill(TEST),
    }


def write_sample(path: Path, rows: int = SAMPLE_ROWS, seed: int = 0) -> None:
    """A small, learnable, deterministic binary classification table: ``f0..f3`` and
    ``label`` (a noisy linear rule)."""
    import numpy as np

    rng = np.random.RandomState(seed)
    X = rng.normal(size=(rows, SAMPLE_FEATURES)).round(4)
    score = X @ np.array([1.5, -1.0, 0.8, 0.0]) + rng.normal(scale=0.5, size=rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f"f{i}" for i in range(SAMPLE_FEATURES)] + ["label"])
        for x, s in zip(X, score):
            writer.writerow([f"{v:.4f}" for v in x] + [int(s > 0)])


PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "The $name pipeline for trainyard ($framework)"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["trainyard[$framework]"]

# How trainyard finds this pipeline once the package is installed: the CLI, Prefect
# flows and workers, Airflow's DAG processor and tasks all read this entry point.
[project.entry-points."trainyard.pipelines"]
$name = "$pkg.pipeline:SPEC"

[tool.setuptools.packages.find]
include = ["$pkg*"]

[tool.setuptools.package-data]
$pkg = ["data/*.csv"]

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
'''

PACKAGE_INIT = '''\
"""The $name pipeline for trainyard: its PipelineSpec is ``$pkg.pipeline.SPEC``."""
'''

SPEC_HEAD = '''\
"""The $name pipeline ($framework). Point ``SOURCE`` at your data (an absolute path or
an ``s3://`` URI of CSV, Parquet or JSON lines, with a ``label`` column), or pass
``--source`` to ``trainyard run``; change the model below."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from pipelines import PipelineSpec

# The sample this package ships: $features numeric columns f0.. and a 0/1 label.
SOURCE = str(Path(__file__).resolve().parent / "data" / "sample.csv")
'''

_TORCH = '''
N_FEATURES = $features  # the data's columns besides the label
N_CLASSES = 2   # labels are 0 .. N_CLASSES - 1


def build_model(config: Dict[str, Any]) -> Any:
    """The network; prediction loads a checkpoint's weights into a fresh one."""
    import torch.nn as nn

    hidden = int(config.get("hidden", 16))
    return nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.ReLU(),
                         nn.Linear(hidden, N_CLASSES))


def train_func(config: Dict[str, Any], data: Any) -> None:
    """Runs on every worker; ``data`` (pipelines.tabular.TabularData) reads the split."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import engine
    from engine.torch import prepare_model

    X, y = data.arrays("train", shard=True)  # this worker's share of the rows
    X_val, y_val = (torch.from_numpy(a) for a in data.arrays("validation"))
    loader = DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)),
                        batch_size=int(config.get("batch_size", 32)), shuffle=True)
    model, start = build_model(config), 0
    checkpoint = engine.get_checkpoint()  # set when a retried run resumes
    if checkpoint is not None:
        state = checkpoint.to_dict()
        model.load_state_dict(state["model_weights"])
        start = state["epoch"] + 1
    model = prepare_model(model)  # data-parallel across the workers
    optimizer = torch.optim.Adam(model.parameters(), lr=float(config.get("lr", 0.01)))
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(start, int(config["epochs"])):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(X_val)
            metrics = {"epoch": epoch, "loss": loss.item(),
                       "val_loss": loss_fn(logits, y_val).item(),
                       "val_accuracy": (logits.argmax(dim=1) == y_val).float().mean().item()}
        ckpt = None
        if engine.get_context().get_world_rank() == 0:
            weights = getattr(model, "module", model).state_dict()
            ckpt = engine.Checkpoint.from_dict({"epoch": epoch, "model_weights": weights})
        engine.report(metrics, checkpoint=ckpt)


SPEC = PipelineSpec(
    name="$name",
    description="A small torch MLP on the sample data (replace with yours)",
    framework="torch", source=SOURCE, label_column="label",
    train_func=train_func, model=build_model,
    defaults={"lr": 0.01, "hidden": 16, "batch_size": 32, "epochs": 10},
    param_space={"lr": {"grid_search": [0.003, 0.01]}},
    gate={"accuracy": ">=0.7"},
)
'''

_TENSORFLOW = '''
N_FEATURES = $features  # the data's columns besides the label
N_CLASSES = 2   # labels are 0 .. N_CLASSES - 1


def build_model(config: Dict[str, Any]) -> Any:
    import tensorflow as tf

    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(N_FEATURES,)),
        tf.keras.layers.Dense(int(config.get("hidden", 16)), activation="relu"),
        tf.keras.layers.Dense(N_CLASSES, activation="softmax"),
    ])


def train_func(config: Dict[str, Any], data: Any) -> None:
    """Runs on every worker; ``data`` (pipelines.tabular.TabularData) reads the split.
    The callback reports Keras's logs and saves the model each epoch."""
    import tensorflow as tf

    import engine
    from engine.tensorflow import ReportCheckpointCallback

    X, y = data.arrays("train")  # the strategy shards the batches across the workers
    X_val, y_val = data.arrays("validation")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(config)
        model.compile(optimizer=tf.keras.optimizers.Adam(float(config.get("lr", 0.01))),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    batch = int(config.get("batch_size", 32)) * engine.get_context().get_world_size()
    train = tf.data.Dataset.from_tensor_slices((X, y)).shuffle(len(X), seed=0).batch(batch)
    val = tf.data.Dataset.from_tensor_slices((X_val, y_val)).batch(batch)
    model.fit(train, validation_data=val, epochs=int(config["epochs"]), verbose=0,
              callbacks=[ReportCheckpointCallback()])


SPEC = PipelineSpec(
    name="$name",
    description="A small Keras network on the sample data (replace with yours)",
    framework="tensorflow", source=SOURCE, label_column="label", train_func=train_func,
    defaults={"lr": 0.01, "hidden": 16, "batch_size": 32, "epochs": 10},
    param_space={"lr": {"grid_search": [0.003, 0.01]}},
    gate={"accuracy": ">=0.7"},
)
'''

_XGBOOST = '''
SPEC = PipelineSpec(
    name="$name",
    description="XGBoost trees on the sample data (replace with yours)",
    framework="xgboost", source=SOURCE, label_column="label",
    # The booster's fixed parameters; the defaults and the search are flat, with
    # num_boost_round counting the rounds.
    params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"],
            "tree_method": "hist"},
    defaults={"max_depth": 3, "eta": 0.3, "num_boost_round": 20, "seed": 0},
    param_space={"max_depth": {"grid_search": [2, 4]}},
    gate={"accuracy": ">=0.7"},
)
'''

_LIGHTGBM = '''
SPEC = PipelineSpec(
    name="$name",
    description="LightGBM trees on the sample data (replace with yours)",
    framework="lightgbm", source=SOURCE, label_column="label",
    # The booster's fixed parameters; the defaults and the search are flat, with
    # num_boost_round counting the rounds.
    params={"objective": "binary", "metric": ["binary_logloss", "binary_error"],
            "verbose": -1},
    defaults={"num_leaves": 15, "learning_rate": 0.1, "min_data_in_leaf": 5,
              "num_boost_round": 20, "seed": 0},
    param_space={"num_leaves": {"grid_search": [7, 15]}},
    gate={"accuracy": ">=0.7"},
)
'''

_SKLEARN = '''
SPEC = PipelineSpec(
    name="$name",
    description="A scikit-learn random forest on the sample data (replace with yours)",
    framework="sklearn", source=SOURCE, label_column="label",
    # Any estimator class (or factory) works; the defaults and the search are its
    # parameters (set_params). It has no epochs: `trainyard run` takes no --epochs.
    estimator="sklearn.ensemble:RandomForestClassifier",
    defaults={"n_estimators": 50, "max_depth": 5, "random_state": 0},
    param_space={"max_depth": {"grid_search": [3, 6]}},
    gate={"accuracy": ">=0.7"},
)
'''

SPECS = {"torch": _TORCH, "tensorflow": _TENSORFLOW, "xgboost": _XGBOOST,
         "lightgbm": _LIGHTGBM, "sklearn": _SKLEARN}

TEST = '''\
"""$name trains for one epoch (boosting round, or one fit) through trainyard's tasks,
as `trainyard run`, the Prefect flow and the Airflow DAG run it, and its checkpoint
scores the validation split."""

from __future__ import annotations

import os

import pytest

import tasks

from $pkg.pipeline import SPEC

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def findable(monkeypatch):
    """Found by name before `pip install -e .` (which registers the entry point), and
    importable by the training workers."""
    monkeypatch.setenv("TRAINYARD_PIPELINES", "$name=$pkg.pipeline:SPEC")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (PROJECT, os.environ.get("PYTHONPATH")) if p))


def test_trains_one_epoch_and_scores(tmp_path):
    storage = str(tmp_path)
    data = tasks.ingest(SPEC.source, storage=storage)
    splits = tasks.split(data, test_size=0.25, seed=0, stratify_column=SPEC.label_column)
    config = {SPEC.epochs_key: 1} if SPEC.epochs_key else {}
    ckpt = tasks.train(SPEC.name, splits, {"num_workers": 1},
                      {"storage": storage, "config": config, "verbose": 0})
    assert ckpt.pipeline == SPEC.name and ckpt.uri.startswith(storage)
    if SPEC.epochs_key:
        assert ckpt.config[SPEC.epochs_key] == 1

    metrics = tasks.evaluate(ckpt, splits["validation"])
    assert metrics["num_rows"] == splits["validation"].num_rows
    assert 0.0 <= metrics["accuracy"] <= 1.0
'''

README = '''\
# $dist

The `$name` pipeline for trainyard ($framework): the model in
`$pkg/pipeline.py`, a sample data set in `$pkg/data/sample.csv` (its default source).

```bash
pip install -e .                  # registers the entry point: trainyard now knows "$name"
pytest                            # trains it for one epoch through trainyard's tasks
trainyard pipelines               # lists $name, from $dist 0.1.0
```

## Run it

```bash
# The CLI: ingest -> split -> train -> evaluate, on a local Ray (or $$RAY_ADDRESS)
trainyard run $name$epochs_note
trainyard run $name --source /abs/path/to/your/data.csv

# The Prefect flow: ... -> tune -> train -> evaluate -> promote -> batch predict
python -m flows.retrain --pipeline $name

# The Airflow DAGs shipped in trainyard's dags/ build retrain_$name and
# batch_predict_$name for every installed pipeline (or those in
# $$TRAINYARD_AIRFLOW_PIPELINES); install this package where the DAG processor and
# the workers run, then:
airflow dags test retrain_$name
```

Every process that runs it needs the package installed (or `$$TRAINYARD_PIPELINES=
"$name=$pkg.pipeline:SPEC"` with this directory on `PYTHONPATH`), the Ray workers
included.

## Make it yours

- `SOURCE` in `$pkg/pipeline.py`: your data (an absolute path or `s3://` URI of CSV,
  Parquet or JSON lines) and `label_column`; numeric features, labels `0..k-1`.
- The model: see the comments in `$pkg/pipeline.py`; `defaults` are the
  hyperparameters, `param_space` the search the retrain flow and DAG tune, `gate` what
  a model must reach on the validation split to be promoted.
'''
