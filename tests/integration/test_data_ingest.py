"""Data ingest on a real local Ray: datasets=, per-worker shards, epochs, inputs, errors,
a dataset larger than the object store, the digits MLP from Ray Data, preprocessors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from engine import DataConfig, RunConfig, ScalingConfig, TrainingFailedError, session
from engine.callbacks import Callback
from engine.trainer import DataParallelTrainer

# The module's fits check what training produced, not how workers start: they run on
# warm pooled workers (tests/README.md, "How a new test pays for itself").
pytestmark = pytest.mark.usefixtures("pooled_workers")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class AllRanks(Callback):
    def __init__(self):
        self.rounds = []

    def on_report(self, metrics, all_metrics):
        self.rounds.append(all_metrics)


def _fit(train_func, datasets, storage_path, *, workers=2, config=None, data_config=None,
         preprocessor=None, trainer_cls=DataParallelTrainer, **kwargs):
    cb = AllRanks()
    trainer = trainer_cls(train_func, train_loop_config=config,
                          scaling_config=ScalingConfig(num_workers=workers),
                          run_config=RunConfig(storage_path=storage_path, callbacks=[cb]),
                          datasets=datasets, dataset_config=data_config,
                          preprocessor=preprocessor, **kwargs)
    return trainer.fit(), cb


def _ids_per_epoch(config):
    """Each epoch, one full pass over this worker's shard; report the ids it saw."""
    shard = session.get_dataset_shard(config.get("name", "train"))
    for epoch in range(config["epochs"]):
        ids = [int(i) for batch in shard.iter_batches(batch_size=config.get("batch_size", 64),
                                                       batch_format="numpy")
               for i in batch[config.get("column", "id")]]
        session.report({"epoch": epoch, "ids": ids})


# --- splitting ------------------------------------------------------------------------
def test_shards_partition_an_odd_sized_dataset_every_epoch(ray_start_4_cpus, storage_path,
                                                           caplog):
    import ray.data

    n, epochs = 1001, 4
    caplog.set_level(logging.INFO, logger="engine")
    _, cb = _fit(_ids_per_epoch, {"train": ray.data.range(n)}, storage_path,
                 config={"epochs": epochs, "batch_size": 37})
    assert len(cb.rounds) == epochs
    everything = set(range(n))
    for ranks in cb.rounds:
        a, b = (set(r["ids"]) for r in ranks)
        assert len(ranks[0]["ids"]) == len(a) == len(ranks[1]["ids"]) == len(b) == n // 2
        assert not a & b                                  # no row given twice
        assert a | b <= everything                        # no row invented
        assert len(everything - (a | b)) == n % 2 == 1    # equal=True dropped one row
    msgs = [r.getMessage() for r in caplog.records if r.name == "engine"]
    assert any("'train': 1001 rows split into 2 equal shards of 500 rows; 1 row dropped"
               in m for m in msgs), msgs


def test_even_dataset_loses_nothing_and_says_so(ray_start_4_cpus, storage_path, caplog):
    import ray.data

    caplog.set_level(logging.INFO, logger="engine")
    _, cb = _fit(_ids_per_epoch, {"train": ray.data.range(100)}, storage_path,
                 config={"epochs": 2})
    for ranks in cb.rounds:
        assert sorted(ranks[0]["ids"] + ranks[1]["ids"]) == list(range(100))
    assert any("100 rows split into 2 equal shards of 50 rows; none dropped"
               in r.getMessage() for r in caplog.records)


def _train_and_validation(config):
    train = session.get_dataset_shard("train")
    val = session.get_dataset_shard("validation")
    for epoch in range(config["epochs"]):
        session.report({
            "train_ids": [int(i) for b in train.iter_batches(batch_size=8) for i in b["id"]],
            "validation_ids": sorted(int(i) for b in val.iter_batches(batch_size=8)
                                     for i in b["id"]),
        })


def test_datasets_not_split_are_given_whole_to_every_worker(ray_start_4_cpus, storage_path):
    import ray.data

    _, cb = _fit(_train_and_validation,
                 {"train": ray.data.range(20), "validation": ray.data.range(7)}, storage_path,
                 config={"epochs": 3}, data_config=DataConfig(datasets_to_split=["train"]))
    assert len(cb.rounds) == 3
    for ranks in cb.rounds:
        assert [r["validation_ids"] for r in ranks] == [list(range(7))] * 2
        assert sorted(ranks[0]["train_ids"] + ranks[1]["train_ids"]) == list(range(20))


def test_seed_train_test_split_example(ray_start_4_cpus, storage_path):
    """The seed's ``train_test_split(test_size=0.2, shuffle=True)``, both datasets split."""
    import ray.data

    ds = ray.data.from_items([{"id": i, "y": 2.0 * i} for i in range(100)])
    train_ds, valid_ds = ds.train_test_split(test_size=0.2, shuffle=True)
    _, cb = _fit(_train_and_validation, {"train": train_ds, "validation": valid_ds},
                 storage_path, config={"epochs": 1})
    (r0, r1), = cb.rounds
    assert len(r0["train_ids"]) == len(r1["train_ids"]) == 40
    train_ids = set(r0["train_ids"]) | set(r1["train_ids"])
    val_ids = set(r0["validation_ids"]) | set(r1["validation_ids"])
    assert len(val_ids) == 20 and not train_ids & val_ids
    assert train_ids | val_ids == set(range(100))


# --- inputs ---------------------------------------------------------------------------
def _frame(n=11):
    return pd.DataFrame({"id": np.arange(n), "x": np.arange(n, dtype=np.float64) * 0.5})


def _write_input(kind, tmp_path):
    df = _frame()
    if kind == "dataframe":
        return df
    if kind == "parquet_file":
        path = tmp_path / "data.parquet"
        df.to_parquet(path)
        return str(path)
    if kind == "parquet_dir":
        d = tmp_path / "pq"
        d.mkdir()
        df.iloc[:6].to_parquet(d / "part-0.parquet")
        df.iloc[6:].to_parquet(d / "part-1.parquet")
        return str(d)
    if kind == "csv_file":
        path = tmp_path / "data.csv"
        df.to_csv(path, index=False)
        return str(path)
    if kind == "csv_dir":
        d = tmp_path / "csv"
        d.mkdir()
        df.iloc[:5].to_csv(d / "a.csv", index=False)
        df.iloc[5:].to_csv(d / "b.csv", index=False)
        return str(d)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dataframe", "parquet_file", "parquet_dir", "csv_file",
                                  "csv_dir"])
def test_dataframe_parquet_and_csv_inputs(ray_start_4_cpus, storage_path, tmp_path, kind,
                                          caplog):
    caplog.set_level(logging.INFO, logger="engine")
    data = _write_input(kind, tmp_path)
    _, cb = _fit(_ids_per_epoch, {"train": data, "validation": data}, storage_path,
                 config={"epochs": 2}, data_config=DataConfig(datasets_to_split=["train"]))
    for ranks in cb.rounds:
        a, b = (set(r["ids"]) for r in ranks)
        assert len(a) == len(b) == 5 and not a & b and len(a | b) == 10
        assert a | b <= set(range(11))
    msgs = " | ".join(r.getMessage() for r in caplog.records if r.name == "engine")
    if kind.startswith("csv"):  # CSV carries no row count: the log says "at most 1"
        assert "'train' is split into 2 equal shards" in msgs and "at most 1" in msgs
    else:  # DataFrame: in memory; Parquet: counted from the footers, no data read
        assert "'train': 11 rows split into 2 equal shards of 5 rows; 1 row dropped" in msgs


def test_unsupported_input_is_a_config_error(ray_start_4_cpus, storage_path):
    from engine.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"datasets\['train'\] is a dict"):
        _fit(_ids_per_epoch, {"train": {"a": [1]}}, storage_path, config={"epochs": 1})


@pytest.fixture
def s3_parquet(s3_server):
    """A directory of two Parquet files in the shared moto S3 server (conftest), as an
    ``s3://`` URI carrying the endpoint; the fake keys are in every process's env."""
    import uuid

    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    uri = s3_server.uri(f"ingest/{uuid.uuid4().hex[:8]}")
    fs, prefix = pafs.FileSystem.from_uri(uri)
    df = _frame()
    pq.write_table(pa.Table.from_pandas(df.iloc[:4]), f"{prefix}/p0.parquet", filesystem=fs)
    pq.write_table(pa.Table.from_pandas(df.iloc[4:]), f"{prefix}/p1.parquet", filesystem=fs)
    return uri


@pytest.mark.parametrize("form", ["with endpoint", "bare"])
def test_s3_parquet_uri_input(ray_start_4_cpus, storage_path, s3_parquet, caplog, form):
    """A URI carrying its endpoint, and a bare one (``s3://bucket/prefix``, as pipeline
    references hold) of a bucket this process opened with its endpoint: Ray Data's read
    tasks, in other processes, get the endpoint too."""
    from engine._internal.storage import filesystem as _storage

    caplog.set_level(logging.INFO, logger="engine")
    uri = s3_parquet
    if form == "bare":
        _storage.resolve(s3_parquet)  # as ingest() did when it wrote the data set
        uri = _storage.redact(s3_parquet)
        assert "?" not in uri
    _, cb = _fit(_ids_per_epoch, {"train": uri}, storage_path, config={"epochs": 2})
    for ranks in cb.rounds:
        a, b = (set(r["ids"]) for r in ranks)
        assert len(a) == len(b) == 5 and not a & b and a | b <= set(range(11))
    assert any("11 rows split into 2 equal shards" in r.getMessage() for r in caplog.records)


# --- errors ---------------------------------------------------------------------------
def _asks_for_unknown_name():
    session.get_dataset_shard("valid")


def test_unknown_dataset_name_lists_the_names_passed(ray_start_4_cpus, storage_path):
    import ray.data

    with pytest.raises(TrainingFailedError) as info:
        _fit(_asks_for_unknown_name,
             {"train": ray.data.range(4), "validation": ray.data.range(2)}, storage_path)
    text = str(info.value)
    assert "get_dataset_shard('valid')" in text
    assert "Passed: ['train', 'validation']" in text


def _asks_without_name():
    session.get_dataset_shard()


def test_missing_name_with_several_datasets_lists_them(ray_start_4_cpus, storage_path):
    import ray.data

    with pytest.raises(TrainingFailedError, match=r"\['train', 'validation'\]"):
        _fit(_asks_without_name,
             {"train": ray.data.range(4), "validation": ray.data.range(2)}, storage_path)


def _no_datasets():
    session.get_dataset_shard("train")


def test_unknown_name_without_any_datasets(ray_start_4_cpus, storage_path):
    with pytest.raises(TrainingFailedError, match=r"Passed: none"):
        _fit(_no_datasets, None, storage_path, workers=1)


# --- a dataset larger than the object store ----------------------------------------------
_BIG_SCRIPT = textwrap.dedent('''
    import json, os, sys, time

    import ray

    repo, storage, rows, width = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = 80 * 2**20
    # "local": its own instance, never a cluster that a ray_current_cluster file of
    # another test (`ray start`, on the other xdist worker) names.
    # Two CPUs, started by the script itself (not trainyard's way): the two workers
    # reserve half a CPU each and one stays free for Ray Data (the fractional plan).
    ray.init(address="local", num_cpus=2, object_store_memory=store,
             _node_ip_address="127.0.0.1",
             include_dashboard=False, configure_logging=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": repo}})
    import ray.data

    from engine import RunConfig, ScalingConfig, session
    from engine.callbacks import Callback
    from engine.trainer import DataParallelTrainer

    ray.data.DataContext.get_current().enable_progress_bars = False

    def train_func():
        rows_seen, checksum = 0, 0
        for batch in session.get_dataset_shard("train").iter_batches(
                batch_size=64, batch_format="numpy"):
            data = batch["data"]
            rows_seen += len(data)
            checksum += int(data[:, -1].sum())
        session.report({"rows": rows_seen, "checksum": checksum})

    class Ranks(Callback):
        all = None
        def on_report(self, metrics, all_metrics):
            Ranks.all = all_metrics

    ds = ray.data.range_tensor(rows, shape=(width,), override_num_blocks=rows // 50)
    t0 = time.time()
    DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(storage_path=storage, callbacks=[Ranks()]),
                        datasets={"train": ds}).fit()
    print("RESULT " + json.dumps({
        "rows": [r["rows"] for r in Ranks.all],
        "checksum": sum(r["checksum"] for r in Ranks.all),
        "object_store_bytes": ray.cluster_resources()["object_store_memory"],
        "fit_s": time.time() - t0}))
''')


def test_dataset_larger_than_the_object_store_trains(tmp_path):
    """~315 MB of int64 tensors stream through an 80 MB object store into 2 workers, on
    a Ray the script started with 2 CPUs (the workers take half a CPU each)."""
    rows, width = 4800, 8192  # 64 KiB a row
    data_bytes = rows * width * 8
    script = tmp_path / "big.py"
    script.write_text(_BIG_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [REPO, env.get("PYTHONPATH")] if p)
    env["RAY_DATA_DISABLE_PROGRESS_BARS"] = "1"
    proc = subprocess.run([sys.executable, str(script), REPO, str(tmp_path / "runs"),
                           str(rows), str(width)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    assert res["object_store_bytes"] * 3 < data_bytes, res
    assert res["rows"] == [rows // 2, rows // 2], res
    assert res["checksum"] == rows * (rows - 1) // 2, res  # every row once
    assert "reserves 0.5 CPU" in out, out[-4000:]  # streamed beside fractional workers


# --- the digits MLP from Ray Data ------------------------------------------------------------
def test_digits_from_ray_data_matches_the_dataloader_version(ray_start_4_cpus, storage_path):
    from engine.torch import TorchTrainer
    from pipelines import digits

    cfg = {"epochs": 15, "lr": 3e-3, "batch_size": 32, "seed": 0}
    loader_result, _ = _fit(digits.train_func, None, storage_path, config=dict(cfg),
                            trainer_cls=TorchTrainer)
    ray_result, cb = _fit(digits.train_func_ray_data, digits.digits_datasets(), storage_path,
                          config=dict(cfg, report_seen_ids=True), trainer_cls=TorchTrainer,
                          data_config=DataConfig(datasets_to_split=["train"]))
    acc_loader = loader_result.metrics["accuracy"]
    acc_ray = ray_result.metrics["accuracy"]
    assert acc_loader >= 0.9 and acc_ray >= 0.9, (acc_loader, acc_ray)
    assert abs(acc_ray - acc_loader) <= 0.02, (acc_ray, acc_loader)
    # The checkpoint holds the same kind of model, and both ranks kept identical weights.
    assert digits.evaluate_checkpoint(ray_result.checkpoint) == pytest.approx(acc_ray)
    n_train = len(digits.load_digits_split()[0])
    for ranks in cb.rounds:
        assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
        a, b = set(ranks[0]["seen_ids"]), set(ranks[1]["seen_ids"])
        assert len(a) == len(b) == n_train // 2 and not a & b


# --- preprocessors -----------------------------------------------------------------------
def _scaled_stats(config):
    shard = session.get_dataset_shard("train")
    val = session.get_dataset_shard("validation")
    xs = np.concatenate([b["x"] for b in shard.iter_batches(batch_format="numpy")])
    vs = np.concatenate([b["x"] for b in val.iter_batches(batch_format="numpy")])
    session.report({"sum": float(xs.sum()), "sumsq": float((xs ** 2).sum()), "n": len(xs),
                    "val": vs.tolist()},
                   checkpoint=_small_checkpoint() if config.get("checkpoint") else None)


def _small_checkpoint():
    from engine import Checkpoint

    return Checkpoint.from_dict({"w": 1})


def _scaler_data():
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"x": rng.normal(5.0, 3.0, 400), "id": np.arange(400)})
    val = pd.DataFrame({"x": np.array([5.0, 8.0, -1.0]), "id": np.arange(3)})
    return train, val


def test_preprocessor_is_fitted_on_train_and_applied_to_all_datasets(ray_start_4_cpus,
                                                                     storage_path):
    import ray.data

    from engine.preprocessors import StandardScaler

    train, val = _scaler_data()
    scaler = StandardScaler(["x"])
    _, cb = _fit(_scaled_stats, {"train": ray.data.from_pandas(train), "validation": val},
                 storage_path, config={}, preprocessor=scaler,
                 data_config=DataConfig(datasets_to_split=["train"]))
    assert scaler.fitted
    mean, std = train["x"].mean(), train["x"].std(ddof=0)
    assert scaler.stats_["x"] == pytest.approx((mean, std))
    (r0, r1), = cb.rounds
    n = r0["n"] + r1["n"]
    assert n == 400
    assert (r0["sum"] + r1["sum"]) / n == pytest.approx(0.0, abs=1e-9)
    assert (r0["sumsq"] + r1["sumsq"]) / n == pytest.approx(1.0)
    expected_val = ((val["x"] - mean) / std).tolist()
    assert r0["val"] == pytest.approx(expected_val) and r1["val"] == pytest.approx(expected_val)


def test_preprocessor_saved_in_a_checkpoint_round_trips(tmp_path, ray_start_4_cpus):
    """The save half the controller calls on commit, and ``Checkpoint.get_preprocessor``."""
    import ray.data

    from engine import Checkpoint
    from engine.preprocessors import save_preprocessor
    from engine._internal.storage.filesystem import Storage
    from engine.preprocessors import Chain, MinMaxScaler, StandardScaler

    train, val = _scaler_data()
    chain = Chain(StandardScaler(["x"]), MinMaxScaler(["id"]))
    chain.fit(ray.data.from_pandas(train))
    ckpt_dir = tmp_path / "checkpoint_000000"
    ckpt_dir.mkdir()
    st = Storage.from_path(str(tmp_path))
    assert save_preprocessor(st, str(ckpt_dir), chain) == "preprocessor.json"
    assert save_preprocessor(st, str(ckpt_dir), chain) is None  # an existing file is kept
    assert save_preprocessor(st, str(ckpt_dir), None) is None
    loaded = Checkpoint.from_directory(str(ckpt_dir)).get_preprocessor()
    assert isinstance(loaded, Chain) and loaded.fitted
    pd.testing.assert_frame_equal(loaded.transform_batch(val), chain.transform_batch(val))
    # The Ray Dataset transform and the batch transform agree.
    via_ray = chain.transform(ray.data.from_pandas(val)).to_pandas()
    pd.testing.assert_frame_equal(via_ray.reset_index(drop=True),
                                  chain.transform_batch(val).reset_index(drop=True),
                                  check_dtype=False)  # Ray's to_pandas: Arrow-backed dtypes
    assert Checkpoint.from_directory(str(tmp_path)).get_preprocessor() is None


def test_trainer_writes_its_preprocessor_into_every_checkpoint(ray_start_4_cpus,
                                                               storage_path):
    import ray.data

    from engine import CheckpointConfig
    from engine.preprocessors import StandardScaler

    train, val = _scaler_data()
    scaler = StandardScaler(["x"])
    trainer = DataParallelTrainer(
        _scaled_stats, train_loop_config={"checkpoint": True},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage_path,
                             checkpoint_config=CheckpointConfig(num_to_keep=1)),
        datasets={"train": ray.data.from_pandas(train), "validation": val},
        dataset_config=DataConfig(datasets_to_split=["train"]), preprocessor=scaler)
    result = trainer.fit()
    loaded = result.checkpoint.get_preprocessor()
    assert loaded is not None, os.listdir(result.checkpoint.path)
    pd.testing.assert_frame_equal(loaded.transform_batch(val), scaler.transform_batch(val))
    assert result.checkpoint.to_dict() == {"w": 1}
    assert "preprocessor.json" in json.load(
        open(os.path.join(result.checkpoint.path, ".trainyard_committed")))["files"]
