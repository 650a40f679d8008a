"""What a ray_job step ships of its pipeline's code (issue 21): py_modules for a local
source tree, pip name==version for an index release, nothing for trainyard's own
pipelines or what the user's runtime_env covers. Plugins are real: a package and its
installed metadata (dist-info with entry points, direct_url.json) in a temporary
directory on sys.path, found by pipeline discovery."""

from __future__ import annotations

import json

import pytest

import pipelines
from engine.exceptions import ConfigError
from pipelines import _plugins
from tasks.ray_jobs.shipping import with_pipeline

SPEC_MODULE = '''
from pipelines import PipelineSpec
SPEC = PipelineSpec(name="{name}", source="sklearn:digits", label_column="target",
                    framework="xgboost")
'''


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path that plays site-packages; discovery re-reads it."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv(pipelines.PIPELINES_ENV_VAR, raising=False)
    _plugins.refresh()
    yield root
    monkeypatch.undo()
    _plugins.refresh()


def _package(site, module: str, name: str) -> str:
    pkg = site / module
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SPEC_MODULE.format(name=name))
    return str(pkg)


def _installed(site, dist: str, version: str, module: str, name: str,
               from_dir: str = "") -> str:
    """The package plus its dist-info, as pip leaves them (from_dir: installed from that
    local directory, as `pip install [-e] ./dir` records it)."""
    path = _package(site, module, name)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n"
                                   f"Version: {version}\n")
    (info / "entry_points.txt").write_text(
        f"[{pipelines.ENTRY_POINT_GROUP}]\n{name} = {module}:SPEC\n")
    if from_dir:
        (info / "direct_url.json").write_text(json.dumps(
            {"url": f"file://{from_dir}", "dir_info": {"editable": True}}))
    _plugins.refresh()
    return path


def test_trainyards_own_pipelines_add_nothing(site):
    assert with_pipeline(None, "digits") is None
    user = {"pip": ["scikit-learn"]}
    assert with_pipeline(user, "breast_cancer") == user


def test_a_pipeline_from_the_environment_variable_ships_its_source_tree(site, monkeypatch):
    path = _package(site, "team_models", "churn")
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, "churn=team_models:SPEC")
    user = {"env_vars": {"LOG_LEVEL": "debug"}, "pip": ["pandas"]}
    env = with_pipeline(user, "churn")
    assert env["py_modules"] == [path]
    assert env["env_vars"] == {"LOG_LEVEL": "debug",
                               pipelines.PIPELINES_ENV_VAR: "churn=team_models:SPEC"}
    assert env["pip"] == ["pandas"] and "py_modules" not in user  # the user's is kept


def test_an_index_release_is_pip_installed_by_name_and_version(site):
    _installed(site, "churn-models", "1.4.2", "churn_models", "churn")
    env = with_pipeline(None, "churn")
    assert env == {"pip": ["churn-models==1.4.2"]}
    env = with_pipeline({"pip": {"packages": ["pandas"], "pip_check": False}}, "churn")
    assert env["pip"] == {"packages": ["pandas", "churn-models==1.4.2"], "pip_check": False}
    assert with_pipeline({"uv": ["pandas"]}, "churn") == {
        "uv": ["pandas", "churn-models==1.4.2"]}


def test_a_path_or_editable_install_ships_its_source_tree_and_names_it(site, tmp_path):
    path = _installed(site, "churn-models", "0.1.0", "churn_models", "churn",
                      from_dir=str(tmp_path / "checkout"))
    env = with_pipeline(None, "churn")
    # The job gets the code but not the distribution's entry points: it is named.
    assert env == {"py_modules": [path],
                   "env_vars": {pipelines.PIPELINES_ENV_VAR: "churn=churn_models:SPEC"}}


@pytest.mark.parametrize("user", [
    {"pip": ["Churn_Models>=1.0"]},                 # the distribution, any spelling
    {"pip": {"packages": ["churn.models==1.4.2"]}},
    {"py_modules": ["/somewhere/else/churn_models/"]},  # the same module
    {"py_modules": ["s3://bucket/pkgs/churn_models"]},
])
def test_what_the_users_runtime_env_covers_is_not_added_again(site, user):
    _installed(site, "churn-models", "1.4.2", "churn_models", "churn")
    env = with_pipeline(user, "churn")
    assert env.get("pip") == user.get("pip")
    assert env.get("py_modules") == user.get("py_modules")


def test_a_local_working_dir_with_the_module_covers_it(site, tmp_path, monkeypatch):
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, "churn=team_models:SPEC")
    _package(site, "team_models", "churn")
    (work / "team_models").mkdir()
    env = with_pipeline({"working_dir": str(work)}, "churn")
    assert "py_modules" not in env and env["working_dir"] == str(work)
    assert env["env_vars"][pipelines.PIPELINES_ENV_VAR] == "churn=team_models:SPEC"


def test_a_pipeline_only_registered_in_this_process_cannot_go_to_a_job(site, monkeypatch):
    spec = pipelines.PipelineSpec(name="inline", source="sklearn:digits",
                                  label_column="target", framework="xgboost")
    monkeypatch.setitem(pipelines._REGISTERED, "inline", spec)
    with pytest.raises(ConfigError, match="register_pipeline.*TRAINYARD_PIPELINES"):
        with_pipeline(None, "inline")


def test_a_module_that_is_not_here_says_how_to_ship_it(site, monkeypatch):
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, "ghost=no_such_module_xyz:SPEC")
    with pytest.raises(ConfigError, match="PYTHONPATH.*runtime_env"):
        with_pipeline(None, "ghost")
    # ...unless the user ships it.
    env = with_pipeline({"py_modules": ["s3://b/no_such_module_xyz.zip"]}, "ghost")
    assert env["py_modules"] == ["s3://b/no_such_module_xyz.zip"]
