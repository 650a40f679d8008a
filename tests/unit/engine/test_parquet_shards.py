"""Tree trainers' shards of local Parquet files, read by each worker with pyarrow: which
inputs take that path, and that the split is Ray Data's equal one (every worker the same
number of rows, the remainder dropped, no row twice)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine._internal.data.datasets import make_shards
from engine._internal.data.parquet_shards import ParquetShard, local_parquet_files, plan_file_shards
from engine.config import DataConfig


def _write(path, start: int, rows: int, group: int = 7) -> str:
    table = pa.table({"x": list(range(start, start + rows)),
                      "label": [i % 2 for i in range(start, start + rows)]})
    pq.write_table(table, path, row_group_size=group)
    return str(path)


def test_split_covers_every_row_once_in_equal_ranges_across_files(tmp_path):
    files = [_write(tmp_path / "a.parquet", 0, 23), _write(tmp_path / "b.parquet", 23, 18)]
    shards, total = plan_file_shards(files, 3, split=True)
    assert total == 41
    rows = [shard.read().column("x").to_pylist() for shard in shards]
    assert [len(r) for r in rows] == [13, 13, 13]  # 41 // 3; the last 2 rows dropped
    assert sum(rows, []) == list(range(39))


def test_unsplit_dataset_gives_every_worker_every_row(tmp_path):
    path = _write(tmp_path / "v.parquet", 0, 10)
    shards, _ = plan_file_shards([path], 2, split=False)
    assert [s.read().num_rows for s in shards] == [10, 10]


def test_only_plain_local_parquet_inputs_are_read_directly(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    _write(flat / "part-1.parquet", 0, 5)
    _write(flat / "part-0.parquet", 5, 5)
    (flat / "_SUCCESS").write_text("")
    assert local_parquet_files(str(flat)) == [str(flat / "part-0.parquet"),
                                               str(flat / "part-1.parquet")]
    hive = tmp_path / "hive" / "day=1"
    hive.mkdir(parents=True)
    _write(hive / "p.parquet", 0, 5)
    assert local_parquet_files(str(tmp_path / "hive")) is None  # Ray Data adds `day`
    (tmp_path / "t.csv").write_text("x\n1\n")
    assert local_parquet_files(str(tmp_path / "t.csv")) is None
    assert local_parquet_files("s3://bucket/data.parquet") is None
    assert local_parquet_files(pd.DataFrame({"x": [1]})) is None
    indexed = tmp_path / "indexed.parquet"
    pd.DataFrame({"x": [1, 2]}, index=pd.Index([5, 6], name="id")).to_parquet(indexed)
    assert local_parquet_files(str(indexed)) is None


def test_make_shards_reads_files_directly_only_when_asked(tmp_path):
    path = _write(tmp_path / "t.parquet", 0, 11)
    direct = make_shards({"train": path}, DataConfig(datasets_to_split=["train"]), 2,
                         read_files_directly=True)
    assert all(isinstance(s, ParquetShard) for s in direct["train"])
    assert [s.num_rows for s in direct["train"]] == [5, 5]


def test_a_worker_without_rows_is_told_to_use_fewer_workers(tmp_path):
    shards, _ = plan_file_shards([_write(tmp_path / "t.parquet", 0, 1)], 2, split=True)
    assert shards[0].read().num_rows == 0
    with pytest.raises(ValueError, match="no rows|fewer"):
        _read_with_session(shards[0])


def _read_with_session(shard):
    from unittest import mock

    from engine._internal.gbdt import data

    ctx = mock.Mock(get_world_rank=lambda: 0, get_world_size=lambda: 2)
    with mock.patch("engine.session.get_dataset_shard", return_value=shard), \
            mock.patch("engine.session.get_context", return_value=ctx):
        return data.read_shard("train", "label")
