"""Pipelines as plugins: found through entry points (real ``*.dist-info`` directories on
the path), ``$TRAINYARD_PIPELINES`` and the built-in table; a broken plugin is reported
with its name and the fix while every other pipeline keeps working; ``PipelineSpec``'s
defaults per framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
import uuid

import pytest

import pipelines
from engine.exceptions import ConfigError
from pipelines import (PipelinePluginError, PipelineSpec, UnknownPipelineError,
                       get_pipeline, list_pipelines, pipeline_entries, register_pipeline)
from pipelines import _plugins
from tasks.cli import main

REPO = os.path.abspath(os.path.join(__file__, *[os.pardir] * 4))
HEAVY = ("torch", "tensorflow", "xgboost", "lightgbm", "sklearn", "ray", "transformers")


@pytest.fixture(autouse=True)
def fresh_discovery(monkeypatch):
    """Every test reads entry points anew, and leaves none behind."""
    monkeypatch.delenv(pipelines.PIPELINES_ENV_VAR, raising=False)
    pipelines.refresh()
    yield
    pipelines.refresh()
    pipelines._REGISTERED.clear()


def plugin_module(tmp_path, monkeypatch, source: str, spec_name: str = "churn") -> str:
    """A module on the path (a unique name: sys.modules keeps what it imported)."""
    name = f"plug_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source.format(name=spec_name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


GOOD = """
from pipelines import PipelineSpec
SPEC = PipelineSpec(name="{name}", description="team churn model", framework="xgboost",
                    source="/data/churn.csv", label_column="churned")
"""


def installed(tmp_path, monkeypatch, dist: str, version: str, entry_points: dict) -> None:
    """A distribution's metadata on the path, as pip writes it (no code needed)."""
    site = tmp_path / f"site-{uuid.uuid4().hex[:6]}"
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        f"[{pipelines.ENTRY_POINT_GROUP}]\n"
        + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    monkeypatch.syspath_prepend(str(site))
    pipelines.refresh()


def rows() -> dict:
    return {r["name"]: r for r in pipeline_entries()}


def cli(capsys, *argv) -> tuple:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# --- where pipelines come from ------------------------------------------------------------
def test_builtins_are_declared_as_entry_points_in_trainyard_pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        declared = tomllib.load(fh)["project"]["entry-points"][pipelines.ENTRY_POINT_GROUP]
    assert declared == _plugins.BUILTIN
    for name, target in declared.items():
        module, _, attr = target.partition(":")
        spec = getattr(__import__(module, fromlist=[attr]), attr)
        assert isinstance(spec, PipelineSpec) and spec.name == name


def test_builtins_are_found_when_the_installed_metadata_lists_no_entry_points(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    pipelines.refresh()
    assert {"digits", "breast_cancer"} <= set(list_pipelines())
    assert get_pipeline("digits").framework == "torch"
    assert rows()["digits"]["distribution"] == "trainyard" and rows()["digits"]["error"] is None


def test_trainyard_own_entry_points_are_read_like_any_plugin(tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, "trainyard", "9.9.9", dict(_plugins.BUILTIN))
    found = [c for c in _plugins.candidates() if c.name == "digits"]
    assert [(c.origin, c.target) for c in found] == [("trainyard 9.9.9",
                                                      "pipelines.digits:SPEC")]
    assert get_pipeline("digits").name == "digits" and rows()["digits"]["error"] is None


def test_stale_trainyard_metadata_loses_to_the_running_code(tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, "trainyard", "0.0.1",
              {"digits": "pipelines.old_digits:SPEC"})  # a module that no longer exists
    assert get_pipeline("digits").name == "digits"
    assert rows()["digits"]["error"] is None


def test_an_installed_plugin_is_listed_with_its_distribution_and_version(
        tmp_path, monkeypatch, capsys):
    module = plugin_module(tmp_path, monkeypatch, GOOD)
    installed(tmp_path, monkeypatch, "team-models", "1.2.0", {"churn": f"{module}:SPEC"})
    spec = get_pipeline("churn")
    assert spec.source == "/data/churn.csv" and spec.metric == "validation-logloss"
    row = rows()["churn"]
    assert (row["origin"], row["distribution"], row["version"]) == \
        ("team-models 1.2.0", "team-models", "1.2.0")
    code, out, _ = cli(capsys, "pipelines")
    line = next(line for line in out.splitlines() if line.startswith("churn"))
    assert code == 0 and "team-models 1.2.0" in line and "team churn model" in line
    code, out, _ = cli(capsys, "pipelines", "--json")
    assert {r["name"]: r for r in json.loads(out)}["churn"]["framework"] == "xgboost"


def test_code_on_the_path_is_found_through_the_environment_variable(tmp_path, monkeypatch):
    module = plugin_module(tmp_path, monkeypatch, GOOD)
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, f" churn = {module}:SPEC , ")
    assert get_pipeline("churn").label_column == "churned"
    assert rows()["churn"]["origin"] == "$TRAINYARD_PIPELINES"


def test_register_pipeline_still_works_in_process():
    spec = PipelineSpec(name="local_one", framework="xgboost", source="/d.csv",
                        label_column="y")
    register_pipeline(spec)
    assert get_pipeline("local_one") is spec and "local_one" in list_pipelines()
    assert rows()["local_one"]["origin"] == "register_pipeline()"
    with pytest.raises(ValueError, match="replace=True"):
        register_pipeline(PipelineSpec(name="digits", framework="xgboost", source="/d.csv",
                                       label_column="y"))


def test_listing_every_pipeline_imports_no_framework():
    code = ("import sys; from tasks.cli import main; assert main(['pipelines']) == 0; "
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout and "digits" in proc.stdout


# --- bad plugins: a clear error, and the others keep working ------------------------------
BAD_PLUGINS = [
    # (module source, attribute, words the error must contain)
    (GOOD, "SPECC", ["no attribute 'SPECC'", "it has the PipelineSpec SPEC"]),
    ("SPEC = {{'name': '{name}'}}\n", "SPEC", ["is a dict, not a pipelines.PipelineSpec"]),
    ("raise RuntimeError('the model server is down')\n", "SPEC",
     ["failed to import: RuntimeError: the model server is down"]),
    (GOOD.replace('name="{name}"', 'name="other"'), "SPEC",
     ["PipelineSpec named 'other'", "same name in both places"]),
    ("from pipelines import PipelineSpec\nSPEC = PipelineSpec(name='{name}', "
     "framework='torch', source='/d.csv', label_column='y')\n", "SPEC",
     ["failed to import", "needs train_func=f(config, data)"]),
]


@pytest.mark.parametrize("source,attr,words", BAD_PLUGINS,
                         ids=["missing-attribute", "not-a-spec", "raises-on-import",
                              "name-mismatch", "invalid-spec"])
def test_a_bad_installed_plugin_names_itself_and_the_fix(tmp_path, monkeypatch, capsys,
                                                        source, attr, words):
    module = plugin_module(tmp_path, monkeypatch, source)
    installed(tmp_path, monkeypatch, "team-models", "1.2.0", {"churn": f"{module}:{attr}"})
    with pytest.raises(PipelinePluginError) as info:
        get_pipeline("churn")
    message = str(info.value)
    for word in words + ["'churn'", "team-models", "pip uninstall team-models"]:
        assert word in message
    assert isinstance(info.value, ConfigError)  # orchestrators do not retry it
    assert_others_keep_working(capsys, "churn", message)


@pytest.mark.parametrize("value,words", [
    ("churn={module}:NOPE", ["no attribute 'NOPE'", "item churn={module}:NOPE"]),
    ("churn=no_such_module_here:SPEC", ["ModuleNotFoundError", "$TRAINYARD_PIPELINES"]),
    ("churn", ["item 'churn' is not name=module:attribute"]),
])
def test_a_bad_environment_variable_item_names_itself_and_the_fix(tmp_path, monkeypatch,
                                                                  capsys, value, words):
    module = plugin_module(tmp_path, monkeypatch, GOOD)
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, value.format(module=module))
    with pytest.raises(PipelinePluginError) as info:
        get_pipeline("churn")
    for word in words:
        assert word.format(module=module) in str(info.value)
    assert_others_keep_working(capsys, "churn", str(info.value))


def assert_others_keep_working(capsys, broken: str, message: str) -> None:
    assert get_pipeline("digits").name == "digits"
    listed = rows()
    assert listed[broken]["error"] == message
    assert listed["digits"]["error"] is None and listed["breast_cancer"]["framework"]
    code, out, err = cli(capsys, "pipelines")
    assert code == 0 and "digits" in out and "breast_cancer" in out
    assert f"ERROR: {message}"[:60] in out and broken in err
    code, _, err = cli(capsys, "run", broken)
    assert code == 2 and message in err


def test_a_name_two_plugins_claim_is_an_error_naming_both(tmp_path, monkeypatch, capsys):
    first = plugin_module(tmp_path, monkeypatch, GOOD)
    second = plugin_module(tmp_path, monkeypatch, GOOD)
    installed(tmp_path, monkeypatch, "team-models", "1.2.0", {"churn": f"{first}:SPEC"})
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, f"churn={second}:SPEC")
    with pytest.raises(PipelinePluginError) as info:
        get_pipeline("churn")
    message = str(info.value)
    assert f"team-models 1.2.0 ({first}:SPEC)" in message
    assert f"$TRAINYARD_PIPELINES ({second}:SPEC)" in message
    assert "uninstall one" in message
    assert_others_keep_working(capsys, "churn", message)
    # The same target declared twice (installed, and named in the variable) is one.
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, f"churn={first}:SPEC")
    assert get_pipeline("churn").name == "churn"


def test_a_builtin_name_claimed_by_a_plugin_is_a_clash(tmp_path, monkeypatch):
    module = plugin_module(tmp_path, monkeypatch, GOOD, spec_name="digits")
    installed(tmp_path, monkeypatch, "team-models", "1.2.0", {"digits": f"{module}:SPEC"})
    with pytest.raises(PipelinePluginError) as info:
        get_pipeline("digits")
    assert "trainyard 0.1.0 (pipelines.digits:SPEC)" in str(info.value)
    assert f"team-models 1.2.0 ({module}:SPEC)" in str(info.value)
    assert get_pipeline("breast_cancer").name == "breast_cancer"


def test_an_unknown_name_says_how_to_add_a_pipeline():
    with pytest.raises(UnknownPipelineError) as info:
        get_pipeline("churn")
    for word in ("digits", "trainyard.pipelines", "trainyard new-pipeline churn",
                 "TRAINYARD_PIPELINES"):
        assert word in str(info.value)


def test_data_without_the_label_column_fails_before_training(tmp_path, monkeypatch,
                                                             capsys):
    data = tmp_path / "customers.csv"
    data.write_text("tenure,charges,left\n1,20.5,0\n30,80.0,1\n")
    module = plugin_module(tmp_path, monkeypatch, GOOD)
    monkeypatch.setenv(pipelines.PIPELINES_ENV_VAR, f"churn={module}:SPEC")
    code, _, err = cli(capsys, "run", "churn", "--source", str(data), "--storage",
                       str(tmp_path / "storage"))
    assert code == 2
    assert "Pipeline 'churn' predicts 'churned'" in err and "['tenure', 'charges', 'left']" in err
    assert "--source" in err and "label_column" in err
    assert not (tmp_path / "storage" / "runs").exists()


# --- PipelineSpec defaults ---------------------------------------------------------------
def _train(config, data):  # a train function (never run here)
    raise AssertionError


class _Result:
    def __init__(self, config):
        self.config = config


@pytest.mark.parametrize("framework,extra,metric,mode,epochs_key,space,tuned", [
    ("torch", {"train_func": _train}, "val_accuracy", "max", "epochs",
     {"lr": 0.1, "epochs": 2}, {"train_loop_config": {"lr": 0.1, "epochs": 2}}),
    ("tensorflow", {"train_func": _train}, "val_accuracy", "max", "epochs",
     {"lr": 0.1}, {"train_loop_config": {"lr": 0.1}}),
    ("xgboost", {}, "validation-logloss", "min", "num_boost_round",
     {"eta": 0.1, "num_boost_round": 5}, {"params": {"eta": 0.1}, "num_boost_round": 5}),
    ("lightgbm", {}, "validation-binary_logloss", "min", "num_boost_round",
     {"num_leaves": 7}, {"params": {"num_leaves": 7}}),
    ("sklearn", {"estimator": "sklearn.linear_model:LogisticRegression"},
     "validation/test_score", "max", None, {"C": 1.0}, {"params": {"C": 1.0}}),
])
def test_a_minimal_spec_gets_working_defaults_for_its_framework(
        framework, extra, metric, mode, epochs_key, space, tuned):
    spec = PipelineSpec(name="mini", framework=framework, source="/d.csv",
                        label_column="y", **extra)
    assert (spec.metric, spec.mode, spec.epochs_key) == (metric, mode, epochs_key)
    assert callable(spec.make_trainer)
    if epochs_key:
        assert spec.defaults[epochs_key] > 0
    assert spec.tune_space(space) == tuned
    assert spec.config_of(_Result(tuned)) == space  # a trial's config, flat again


def test_gbdt_metric_follows_the_objective_and_regression_defaults():
    multi = PipelineSpec(name="m", framework="xgboost", source="/d.csv", label_column="y",
                         params={"objective": "multi:softprob", "num_class": 3})
    assert multi.metric == "validation-mlogloss" and multi.mode == "min"
    auc = PipelineSpec(name="a", framework="lightgbm", source="/d.csv", label_column="y",
                       params={"objective": "binary", "metric": ["auc"]})
    assert auc.metric == "validation-auc" and auc.mode == "max"
    reg = PipelineSpec(name="r", framework="xgboost", source="/d.csv", label_column="y",
                       task="regression")
    assert reg.metric == "validation-rmse"
    torch_reg = PipelineSpec(name="t", framework="torch", source="/d.csv", label_column="y",
                             task="regression", train_func=_train)
    assert (torch_reg.metric, torch_reg.mode) == ("val_loss", "min")


def test_predictor_kwargs_defaults_load_the_model_and_trusted_estimators():
    spec = PipelineSpec(name="t", framework="torch", source="/d.csv", label_column="y",
                        train_func=_train, model=lambda config: ("net", config["hidden"]))
    assert spec.predictor_kwargs({"hidden": 8}) == {"model": ("net", 8)}
    sk = PipelineSpec(name="s", framework="sklearn", source="/d.csv", label_column="y",
                      estimator="sklearn.linear_model:LogisticRegression")
    assert sk.predictor_kwargs({}) == {"allow_pickle": True}


def test_a_spec_with_its_own_trainer_keeps_the_old_defaults():
    spec = PipelineSpec("own", "desc", "transformers", "/d.csv", "y", make_trainer=_train)
    assert (spec.metric, spec.mode, spec.epochs_key) == ("accuracy", "max", "epochs")
    assert spec.make_trainer is _train
    assert spec.tune_space({"lr": 1}) == {"train_loop_config": {"lr": 1}}


def test_replace_rebinds_the_defaults_to_the_new_spec():
    import dataclasses

    spec = PipelineSpec(name="a", framework="xgboost", source="/d.csv", label_column="y")
    other = dataclasses.replace(spec, name="b", params={"max_depth": 2})
    assert other.make_trainer.spec is other and spec.make_trainer.spec is spec


@pytest.mark.parametrize("kwargs,words", [
    ({"framework": "torch"}, "needs train_func=f(config, data)"),
    ({"framework": "sklearn"}, "needs estimator="),
    ({"framework": "keras"}, "has no default trainer"),
    ({"framework": "xgboost", "label_column": ""}, "needs label_column"),
    ({"framework": "xgboost", "name": "my model"}, "letters, digits"),
    ({"framework": "xgboost", "task": "ranking"}, "'classification' or 'regression'"),
    ({"framework": "xgboost", "params": {"objective": "rank:weird"},
      "name": "x"}, None),
    ({"framework": "lightgbm", "params": {"objective": "lambdarank"}},
     "no default evaluation metric"),
])
def test_a_bad_spec_fails_where_it_is_written(kwargs, words):
    args = {"name": "bad", "source": "/d.csv", "label_column": "y", **kwargs}
    if words is None:  # rank: objectives have ndcg
        assert PipelineSpec(**args).metric == "validation-ndcg"
        return
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        PipelineSpec(**args)
