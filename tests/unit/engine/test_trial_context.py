"""Issue 23, gap 7 without Ray: where workers start and what get_trial_resources says."""

from __future__ import annotations

import os

import pytest

from engine import ScalingConfig
from engine._internal.storage.filesystem import Storage
from engine._internal.worker_group.session import (TrainContext, TrialResources, resource_bundles,
                                      working_dir)
from engine._internal.worker_group.worker import _in_dir


@pytest.fixture
def clean_chdir_env(monkeypatch):
    monkeypatch.delenv("TRAINYARD_CHDIR_TO_TRIAL_DIR", raising=False)
    monkeypatch.delenv("RAY_CHDIR_TO_TRIAL_DIR", raising=False)
    return monkeypatch


def test_working_dir_is_the_local_run_dir_or_a_local_scratch(tmp_path, clean_chdir_env):
    assert working_dir(Storage.from_path(str(tmp_path)), "exp", "t1") == str(tmp_path)
    class RemoteStorage:  # s3:// or gs://: the workers need a local directory
        local = False
        root = "bucket/exp/t1"

    remote = working_dir(RemoteStorage(), "exp", "t1")
    assert remote.endswith(os.path.join("trainyard_trials", "exp", "t1"))


@pytest.mark.parametrize("var", ["TRAINYARD_CHDIR_TO_TRIAL_DIR", "RAY_CHDIR_TO_TRIAL_DIR"])
def test_chdir_can_be_turned_off(tmp_path, clean_chdir_env, var):
    clean_chdir_env.setenv(var, "0")
    assert working_dir(Storage.from_path(str(tmp_path)), "exp", "t1") == ""


def test_in_dir_makes_enters_and_leaves(tmp_path):
    here = os.getcwd()
    target = tmp_path / "a" / "b"
    with _in_dir(str(target)):
        assert os.getcwd() == str(target)
    assert os.getcwd() == here
    with _in_dir(""):
        assert os.getcwd() == here


def test_trial_resources_as_ray_lists_them():
    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2},
                            trainer_resources={"CPU": 1})
    res = TrainContext(resource_bundles=resource_bundles(scaling)).get_trial_resources()
    assert res.bundles == [{"CPU": 1.0}, {"CPU": 2.0}, {"CPU": 2.0}]
    assert res.required_resources == {"CPU": 5.0} and res.head_cpus == 1.0
    assert not res.head_bundle_is_empty
    assert TrialResources([{}, {"CPU": 1.0}]).head_bundle_is_empty
