"""The orchestrator-neutral steps on real Ray, real files and a real S3 server (moto)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine import constants
from engine.exceptions import ConfigError, StorageError
from tasks import steps as core
from tasks.refs import CheckpointRef, DatasetRef

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")



def _frame(ref: DatasetRef) -> pd.DataFrame:
    files = sorted(f for f in os.listdir(ref.uri) if f.endswith(".parquet"))
    return pd.concat([pq.read_table(os.path.join(ref.uri, f)).to_pandas() for f in files],
                     ignore_index=True)


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("pipeline_storage"))


@pytest.fixture(scope="module")
def digits_data(storage):
    data = core.ingest("sklearn:digits", storage=storage)
    return data, core.split(data, test_size=0.2, seed=0, stratify_column="target")


@pytest.fixture(scope="module")
def digits_model(ray_session, storage, digits_data):
    """The digits pipeline trained for 3 epochs on 2 DDP workers, and its evaluation."""
    _, splits = digits_data
    ckpt = core.train("digits", splits, {"num_workers": 2},
                      {"name": "digits-tasks-test", "storage": storage,
                       "config": {"epochs": 3}, "num_to_keep": None})
    return ckpt, core.evaluate(ckpt, splits["validation"])


# --- ingest and split -------------------------------------------------------------------
def test_ingest_builtin_materialises_parquet_with_schema_and_fingerprint(storage,
                                                                         digits_data):
    data, _ = digits_data
    assert data.num_rows == 1797 and data.format == "parquet"
    assert len(data.schema) == 65 and data.schema["target"] == "int64"
    assert data.uri.startswith(os.path.join(storage, "datasets", "digits-"))
    marker = json.loads(open(os.path.join(data.uri, constants.COMMIT_MARKER)).read())
    assert DatasetRef.from_dict(marker["dataset"]).fingerprint == data.fingerprint
    df = _frame(data)
    from sklearn.datasets import load_digits

    frame = load_digits(as_frame=True).frame
    assert list(df.columns) == list(frame.columns)
    np.testing.assert_array_equal(df.to_numpy(), frame.to_numpy())
    # The same content again: the committed copy, same fingerprint, nothing rewritten.
    again = core.ingest("digits", storage=storage)
    assert again.uri == data.uri and again.fingerprint == data.fingerprint


def test_ingest_csv_and_json_files_and_fingerprint_follows_content(tmp_path, storage):
    df = pd.DataFrame({"x": np.arange(10, dtype=np.int64), "y": np.arange(10) / 4})
    df.to_csv(tmp_path / "points.csv", index=False)
    df.to_json(tmp_path / "points.jsonl", orient="records", lines=True)
    from_csv = core.ingest(str(tmp_path / "points.csv"), storage=storage)
    from_json = core.ingest(str(tmp_path / "points.jsonl"), storage=storage)
    assert from_csv.num_rows == from_json.num_rows == 10
    assert from_csv.schema == from_json.schema == {"x": "int64", "y": "double"}
    assert from_csv.fingerprint == from_json.fingerprint  # same rows, same types
    pd.testing.assert_frame_equal(_frame(from_csv), df)
    df.loc[3, "y"] = 7.0
    df.to_csv(tmp_path / "points.csv", index=False)
    assert core.ingest(str(tmp_path / "points.csv"), storage=storage).fingerprint \
        != from_csv.fingerprint


def test_a_data_set_without_commit_marker_is_never_used_and_gets_replaced(tmp_path):
    storage = str(tmp_path / "st")
    first = core.ingest("sklearn:iris", storage=storage)
    # A commit cut short: the directory is there, its marker is not, a file is torn.
    os.remove(os.path.join(first.uri, constants.COMMIT_MARKER))
    with open(os.path.join(first.uri, "part-00000.parquet"), "wb") as f:
        f.write(b"torn")
    again = core.ingest("sklearn:iris", storage=storage)
    assert again.uri == first.uri and again.fingerprint == first.fingerprint
    assert len(_frame(again)) == 150
    assert not [n for n in os.listdir(os.path.dirname(first.uri)) if n.startswith(".")]


def test_a_stalled_ingest_that_resumes_after_another_committed_keeps_the_data_set(
        tmp_path):
    """A data set's name is its content's fingerprint and its commit is first-writer-wins,
    so a writer that stalls (SIGSTOP) mid-write while another ingests the same source
    and commits it cannot damage it: resumed, it finds the committed copy, returns it,
    and leaves nothing behind. (A fence would protect nothing more here: a late writer
    can only commit the same bytes, and it does not even do that.)"""
    import signal
    import subprocess
    import sys
    import time

    import pyarrow as pa

    source = tmp_path / "events.parquet"
    n = 1_500_000
    pq.write_table(pa.table({"x": np.arange(n, dtype=np.int64),
                             "y": np.arange(n, dtype=np.float64) * 0.5}), source)
    storage = tmp_path / "st"
    datasets = storage / "datasets"
    code = ("import json, sys; from tasks import steps; "
            "print(json.dumps(steps.ingest(sys.argv[1], storage=sys.argv[2]).to_dict()))")
    cmd = [sys.executable, "-c", code, str(source), str(storage)]
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    stalled = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    try:
        while not (datasets.exists() and any(p.name.startswith(".staging-")
                                             for p in datasets.iterdir())):
            assert stalled.poll() is None, "the writer finished before it was stopped"
            time.sleep(0.001)
        os.kill(stalled.pid, signal.SIGSTOP)  # mid-write, its staging half full
        winner = DatasetRef.from_dict(json.loads(subprocess.run(
            cmd, stdout=subprocess.PIPE, env=env, check=True).stdout))
        assert winner.num_rows == n
        before = _frame(winner)
        committed = {f: os.stat(os.path.join(winner.uri, f)).st_ino
                     for f in os.listdir(winner.uri)}
        os.kill(stalled.pid, signal.SIGCONT)
        out, _ = stalled.communicate(timeout=120)
    finally:
        if stalled.poll() is None:
            os.kill(stalled.pid, signal.SIGCONT)
            stalled.kill()
    assert stalled.returncode == 0
    late = DatasetRef.from_dict(json.loads(out))
    assert (late.uri, late.fingerprint, late.num_rows) == \
        (winner.uri, winner.fingerprint, winner.num_rows)
    pd.testing.assert_frame_equal(_frame(late), before)
    # The committed copy was not replaced (a reader of it meanwhile was never cut off).
    assert {f: os.stat(os.path.join(winner.uri, f)).st_ino
            for f in os.listdir(winner.uri)} == committed
    assert sorted(p.name for p in datasets.iterdir()) == [os.path.basename(winner.uri)]


def test_a_data_set_written_by_the_previous_version_is_still_committed(tmp_path):
    """Before data sets committed through Storage.commit_dir, their manifest
    ``_dataset.json`` was the commit: such a data set is reused and split, not rewritten."""
    storage = str(tmp_path / "st")
    first = core.ingest("sklearn:iris", storage=storage)
    marker_path = os.path.join(first.uri, constants.COMMIT_MARKER)
    ref = json.loads(open(marker_path).read())["dataset"]
    os.remove(marker_path)  # the old layout: the manifest, no commit marker
    with open(os.path.join(first.uri, "_dataset.json"), "w") as f:
        json.dump(ref, f)
    part = os.path.join(first.uri, "part-00000.parquet")
    before = os.stat(part).st_ino
    again = core.ingest("sklearn:iris", storage=storage)
    assert again.uri == first.uri and again.fingerprint == first.fingerprint
    assert os.stat(part).st_ino == before  # the old copy kept, nothing rewritten
    splits = core.split(again, 0.2, 0)
    assert splits["train"].num_rows + splits["validation"].num_rows == 150


@pytest.mark.parametrize("source, match", [
    ("relative/data.csv", "absolute path"),
    ("sklearn:mnist", "Unknown built-in"),
    ("/no/such/file.parquet", "does not exist"),
])
def test_ingest_bad_sources_say_what_to_pass(storage, source, match):
    with pytest.raises(ConfigError, match=match):
        core.ingest(source, storage=storage)


def test_relative_storage_is_refused_with_the_absolute_alternative():
    with pytest.raises(StorageError, match="relative path"):
        core.ingest("digits", storage="results")


def test_split_is_deterministic_stratified_and_partitions_the_rows(digits_data):
    data, splits = digits_data
    train, val = splits["train"], splits["validation"]
    assert train.num_rows + val.num_rows == data.num_rows
    assert val.num_rows == pytest.approx(0.2 * data.num_rows, abs=10)
    again = core.split(data, test_size=0.2, seed=0, stratify_column="target")
    assert {k: v.fingerprint for k, v in again.items()} == \
        {"train": train.fingerprint, "validation": val.fingerprint}
    other = core.split(data, test_size=0.2, seed=1, stratify_column="target")
    assert other["validation"].fingerprint != val.fingerprint
    tr, va, full = _frame(train), _frame(val), _frame(data)
    # Every row lands in exactly one part (digits has duplicate images: compare counts).
    key = lambda df: df.apply(tuple, axis=1).value_counts()  # noqa: E731
    assert key(pd.concat([tr, va])).sort_index().equals(key(full).sort_index())
    # Class proportions are kept.
    share = va["target"].value_counts() / full["target"].value_counts()
    assert share.between(0.15, 0.25).all()
    with pytest.raises(ConfigError, match="no such column"):
        core.split(data, 0.2, 0, stratify_column="label")
    with pytest.raises(ConfigError, match="between 0 and 1"):
        core.split(data, 1.5, 0)


# --- train, evaluate, batch_predict -----------------------------------------------------
def test_train_returns_a_checkpoint_ref_with_a_model_card(digits_model, digits_data):
    ckpt, _ = digits_model
    _, splits = digits_data
    assert ckpt.pipeline == "digits" and ckpt.framework == "torch"
    assert ckpt.metrics["epoch"] == 2 and 0 < ckpt.metrics["accuracy"] <= 1
    assert ckpt.config["epochs"] == 3 and ckpt.config["lr"] == 3e-3  # defaults + overrides
    assert ckpt.data_fingerprint == splits["train"].fingerprint
    card = json.load(open(os.path.join(ckpt.uri, "model_card.json")))
    assert card["label_column"] == "target" and len(card["feature_columns"]) == 64
    assert os.path.exists(os.path.join(ckpt.run_uri, "learning_curve.png"))
    assert CheckpointRef.from_json(ckpt.to_json()) == ckpt


def test_train_again_with_the_same_name_returns_the_finished_run(digits_model, digits_data,
                                                                 storage):
    ckpt, _ = digits_model
    _, splits = digits_data
    again = core.train("digits", splits, {"num_workers": 2},
                       {"name": "digits-tasks-test", "storage": storage,
                        "config": {"epochs": 3}})
    assert again.uri == ckpt.uri and again.metrics == ckpt.metrics


def test_evaluate_reports_metrics_of_that_checkpoint(digits_model, digits_data):
    ckpt, metrics = digits_model
    _, splits = digits_data
    assert metrics["task"] == "classification" and metrics["num_rows"] == \
        splits["validation"].num_rows
    assert metrics["accuracy"] > 0.5 and metrics["checkpoint_uri"] == ckpt.uri
    assert os.path.getsize(metrics["confusion_matrix_path"]) > 1000
    assert json.load(open(metrics["metrics_uri"]))["accuracy"] == metrics["accuracy"]
    json.dumps(metrics)  # JSON values only (a Prefect result, an XCom)


def test_batch_predict_writes_labels_that_agree_with_evaluate(digits_model, digits_data,
                                                              tmp_path):
    ckpt, metrics = digits_model
    _, splits = digits_data
    val = splits["validation"]
    here = core.batch_predict(ckpt, val, str(tmp_path / "here"))  # small: in process
    pool = core.batch_predict(ckpt, val, str(tmp_path / "pool"), in_process=False)
    for out in (here, pool):
        assert out.num_rows == val.num_rows
        assert list(out.schema) == ["target", "predictions", "predicted_label"]
    # The Ray actor pool and the in-process path write the same table.
    assert pool.schema == here.schema and pool.fingerprint == here.fingerprint
    df = _frame(here)
    assert df["predicted_label"].between(0, 9).all()
    assert (df["predicted_label"] == df["target"]).mean() == pytest.approx(
        metrics["accuracy"])
    # Rows keep the input order: the labels are the validation split's, in order.
    assert df["target"].tolist() == _frame(val)["target"].tolist()
    # Scoring again replaces the output.
    again = core.batch_predict(ckpt, val, str(tmp_path / "here"))
    assert again.fingerprint == here.fingerprint
    assert len([f for f in os.listdir(here.uri) if f.endswith(".parquet")]) == 1


# --- promote ----------------------------------------------------------------------------
def test_failed_gate_leaves_production_on_the_previous_model(digits_model, digits_data,
                                                             tmp_path):
    ckpt, metrics = digits_model
    _, splits = digits_data
    registry = str(tmp_path / "registry")
    assert core.resolve_alias("digits", registry=registry) is None
    first = core.promote(ckpt, metrics, gate={"accuracy": ">=0.5"}, registry=registry)
    assert first.promoted and first.previous is None
    assert core.resolve_alias("digits", registry=registry) == ckpt

    # A candidate that fails its gate: the epoch-0 checkpoint of the same run.
    earlier = CheckpointRef.from_dict({**ckpt.to_dict(), "uri": os.path.join(
        ckpt.run_uri, "checkpoint_000000")})
    earlier_metrics = core.evaluate(earlier, splits["validation"])
    pointer = os.path.join(registry, "digits", "production.json")
    before = open(pointer).read()
    second = core.promote(earlier, earlier_metrics, gate={"accuracy": ">=1.01"},
                          registry=registry)
    assert not second.promoted and second.reasons[0].endswith("FAIL")
    assert second.previous == ckpt
    assert open(pointer).read() == before
    assert core.resolve_alias("digits", registry=registry) == ckpt
    history = core.alias_history("digits", registry=registry)
    assert [h["decision"] for h in history] == ["promoted", "rejected"]
    assert history[1]["checkpoint"]["uri"] == earlier.uri

    # Metrics of one checkpoint cannot promote another.
    with pytest.raises(ConfigError, match="evaluate the checkpoint you promote"):
        core.promote(earlier, metrics, gate={}, registry=registry)


def test_champion_gate_re_evaluates_production_on_the_candidates_data(digits_model,
                                                                     digits_data, tmp_path):
    ckpt, metrics = digits_model
    _, splits = digits_data
    val = splits["validation"]
    registry = str(tmp_path / "registry")
    earlier = CheckpointRef.from_dict({**ckpt.to_dict(), "uri": os.path.join(
        ckpt.run_uri, "checkpoint_000000")})
    earlier_metrics = core.evaluate(earlier, val, output_dir=str(tmp_path / "eval0"))
    assert earlier_metrics["accuracy"] < metrics["accuracy"]  # epoch 0 vs epoch 2
    assert core.promote(ckpt, metrics, gate={}, registry=registry).promoted
    # The worse challenger: the champion (epoch 2) is scored on the same split.
    gate = {"accuracy": [">=0.1", ">=champion"], "log_loss": "<=champion*1.5"}
    rejected = core.promote(earlier, earlier_metrics, gate=gate, registry=registry,
                            dataset=val)
    assert not rejected.promoted and "FAIL (champion" in rejected.reasons[1]
    assert rejected.champion_metrics["accuracy"] == pytest.approx(metrics["accuracy"])
    assert rejected.champion_metrics["dataset_fingerprint"] == val.fingerprint
    assert core.resolve_alias("digits", registry=registry) == ckpt
    entry = core.alias_history("digits", registry=registry)[-1]
    assert entry["champion_metrics"]["accuracy"] == pytest.approx(metrics["accuracy"])
    assert entry["metrics"]["accuracy"] == earlier_metrics["accuracy"]


def test_promote_uses_the_pipeline_gate_and_storage_by_default(digits_model, storage):
    ckpt, metrics = digits_model
    decision = core.promote(ckpt, metrics, alias="staging")
    assert decision.reasons[0].startswith("accuracy")  # digits' gate: accuracy >= 0.9
    assert decision.pointer_uri == os.path.join(storage, "models", "digits", "staging.json")
    assert (core.resolve_alias("digits", "staging", storage=storage) == ckpt) \
        == decision.promoted
    with pytest.raises(ConfigError, match="alias"):
        core.promote(ckpt, metrics, alias="Prod/1")


# --- XGBoost ----------------------------------------------------------------------------
def test_breast_cancer_xgboost_pipeline_trains_evaluates_and_scores(ray_session, storage,
                                                                   tmp_path):
    data = core.ingest("sklearn:breast_cancer", storage=storage)
    splits = core.split(data, 0.25, 0, "target")
    ckpt = core.train("breast_cancer", splits, {"num_workers": 2},
                      {"name": "bc-tasks-test", "storage": storage,
                       "config": {"num_boost_round": 12}})
    assert ckpt.framework == "xgboost" and ckpt.config["num_boost_round"] == 12
    assert ckpt.metrics["validation-logloss"] < 0.4
    metrics = core.evaluate(ckpt, splits["validation"])
    assert metrics["accuracy"] > 0.9 and metrics["roc_auc"] > 0.95
    out = core.batch_predict(ckpt, splits["validation"], str(tmp_path / "bc"))
    df = _frame(out)
    assert set(df["predicted_label"].unique()) <= {0, 1}
    assert (df["predicted_label"] == df["target"]).mean() == pytest.approx(
        metrics["accuracy"])


# --- S3 ---------------------------------------------------------------------------------
def test_ingest_split_and_aliases_on_s3(s3_storage_path, s3_server, digits_model):
    data = core.ingest("sklearn:wine", storage=s3_storage_path)
    assert data.uri.startswith(f"s3://{s3_server.bucket}/") and "endpoint" not in data.uri
    splits = core.split(data, 0.3, 0, "target")
    assert splits["train"].num_rows + splits["validation"].num_rows == 178
    prefix = data.uri.split(f"{s3_server.bucket}/", 1)[1]
    keys = s3_server.keys(prefix.rsplit("/", 1)[0])
    assert any(k.endswith(f"-split-s0-t0.3-by-target/validation/{constants.COMMIT_MARKER}")
               for k in keys)
    assert not any("/.staging-" in k for k in keys)
    ckpt, metrics = digits_model
    decision = core.promote(ckpt, metrics, gate={}, registry=s3_storage_path)
    assert decision.promoted
    assert core.resolve_alias("digits", registry=s3_storage_path) == ckpt
