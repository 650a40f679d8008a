"""deploy/: the Dockerfile installs what pyproject.toml and constraints.txt say, the KubeRay
manifests have the structure the project relies on, and the Airflow files point at dags/.

No Docker engine or Kubernetes here: the files are parsed and checked against the
project's own metadata, so that a renamed extra, a Ray upgrade or a moved entrypoint
breaks this test instead of a deployment."""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib

import pytest

REPO = os.path.abspath(os.path.join(__file__, *[os.pardir] * 4))
DEPLOY = os.path.join(REPO, "deploy")
STORAGE_ENV = ("TRAINYARD_STORAGE_PATH", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _read(*parts: str) -> str:
    with open(os.path.join(REPO, *parts)) as fh:
        return fh.read()


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads(_read("pyproject.toml"))


@pytest.fixture(scope="module")
def pins() -> dict:
    """``{normalized name: version}`` of constraints.txt."""
    out = {}
    for line in _read("constraints.txt").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[_norm(name)] = version
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extras(spec: str) -> list:
    match = re.search(r"\[([^\]]*)\]", spec)
    return [e.strip() for e in match.group(1).split(",")] if match else []


# --- Dockerfile -------------------------------------------------------------------------
def _dockerfile():
    """(ARG defaults, instructions as (keyword, argument) with continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", _read("deploy", "Dockerfile"))
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    args = {}
    for keyword, rest in instructions:
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
    return args, instructions


def _expand(value: str, args: dict) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)


def test_dockerfile_base_image_has_the_constrained_ray_and_python(pins):
    args, instructions = _dockerfile()
    base = _expand(next(rest for kw, rest in instructions if kw == "FROM"), args)
    match = re.fullmatch(r"rayproject/ray:(?P<ray>[\d.]+)-py(?P<py>\d)(?P<minor>\d+)-cpu", base)
    assert match, f"unexpected base image {base!r}"
    assert match["ray"] == pins["ray"], "the image's Ray must be constraints.txt's"
    assert (match["py"], match["minor"]) == ("3", "11"), "the suite is tested on Python 3.11"


def test_dockerfile_installs_the_project_extras_under_constraints(pyproject, pins):
    args, instructions = _dockerfile()
    installs = [shlex.split(_expand(rest, args)) for kw, rest in instructions
                if kw == "RUN" and "pip install" in rest]
    assert len(installs) == 1, installs
    argv = installs[0][:installs[0].index("&&")] if "&&" in installs[0] else installs[0]
    assert argv[:2] == ["pip", "install"]
    assert "-c" in argv and argv[argv.index("-c") + 1] == "constraints.txt"
    requirements = [a for a in argv[2:] if not a.startswith("-")
                    and argv[argv.index(a) - 1] not in ("-c", "--extra-index-url")]
    assert len(requirements) == 1 and requirements[0].startswith(".["), requirements
    extras = _extras(requirements[0])
    known = set(pyproject["project"]["optional-dependencies"])
    assert extras and set(extras) <= known, f"extras {extras} not in pyproject.toml {known}"
    assert "all" in extras
    # Everything the installed extras name is pinned, so the image gets tested versions.
    optional = pyproject["project"]["optional-dependencies"]
    expanded = {e for x in extras for req in optional[x] if req.startswith("trainyard[")
                for e in _extras(req)} | set(extras)
    for extra in sorted(expanded - {"all"}):
        for req in optional[extra]:
            name = _norm(re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0])
            assert name in pins, f"{req} (extra {extra}) is not pinned in constraints.txt"


def test_dockerfile_copies_what_the_distribution_is_built_from(pyproject):
    args, instructions = _dockerfile()
    order = [kw for kw, _ in instructions]
    install_at = next(i for i, (kw, rest) in enumerate(instructions)
                      if kw == "RUN" and "pip install" in rest)
    copied_before = set()
    for kw, rest in instructions[:install_at]:
        if kw == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            copied_before.update(p.rstrip("/") for p in parts[:-1])
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    assert packages <= copied_before, f"COPY {packages - copied_before} before pip install"
    assert {"pyproject.toml", "constraints.txt", pyproject["project"]["readme"]} <= copied_before
    copied = {p.rstrip("/") for kw, rest in instructions if kw == "COPY"
              for p in rest.split()[:-1] if not p.startswith("--")}
    assert "dags" in copied  # Airflow workers on this image find the DAG files
    assert order.count("FROM") == 1


def test_dockerignore_keeps_the_virtualenv_out_of_the_build_context(pyproject):
    lines = [line.strip() for line in _read("deploy", "Dockerfile.dockerignore").splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "**"  # everything excluded, then what the image needs re-included
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    assert packages | {"pyproject.toml", "constraints.txt", "README.md", "dags"} <= allowed
    assert ".venv" not in allowed


# --- KubeRay ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def manifests() -> dict:
    yaml = pytest.importorskip("yaml")
    out = {}
    for name in ("raycluster.yaml", "rayjob.yaml"):
        docs = list(yaml.safe_load_all(_read("deploy", "kuberay", name)))
        assert len(docs) == 1, name
        out[name] = docs[0]
    return out


def _cluster_specs(manifests: dict) -> dict:
    return {"raycluster.yaml": manifests["raycluster.yaml"]["spec"],
            "rayjob.yaml": manifests["rayjob.yaml"]["spec"]["rayClusterSpec"]}


def _containers(spec: dict) -> list:
    groups = [spec["headGroupSpec"]] + list(spec["workerGroupSpecs"])
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_manifests_are_kuberay_v1_objects(manifests):
    assert manifests["raycluster.yaml"]["apiVersion"] == "ray.io/v1"
    assert manifests["raycluster.yaml"]["kind"] == "RayCluster"
    assert manifests["rayjob.yaml"]["apiVersion"] == "ray.io/v1"
    assert manifests["rayjob.yaml"]["kind"] == "RayJob"
    meta = manifests["rayjob.yaml"]["metadata"]
    assert meta.get("name") or meta.get("generateName")


def test_clusters_have_head_and_workers_on_the_project_image(manifests, pyproject, pins):
    version = pyproject["project"]["version"]
    for name, spec in _cluster_specs(manifests).items():
        assert spec["rayVersion"] == pins["ray"], name
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0", name  # job submission
        ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
        assert {6379, 8265, 10001} <= ports, name
        assert spec["workerGroupSpecs"], f"{name}: no worker group"
        for group in spec["workerGroupSpecs"]:
            assert group["groupName"]
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], name
        for container in _containers(spec):
            image = container["image"]
            assert image.rsplit("/", 1)[-1] == f"trainyard:{version}", (name, image)
            assert container["resources"]["limits"]["cpu"], (name, container["name"])


def test_every_ray_pod_gets_s3_storage_from_a_secret(manifests):
    for name, spec in _cluster_specs(manifests).items():
        for container in _containers(spec):
            env = {e["name"]: e for e in container["env"]}
            secrets = set()
            for var in STORAGE_ENV:
                assert var in env, f"{name}/{container['name']} lacks {var}"
                assert "value" not in env[var], f"{var} must come from a secret, not a literal"
                ref = env[var]["valueFrom"]["secretKeyRef"]
                assert ref["key"] == var
                secrets.add(ref["name"])
            assert len(secrets) == 1  # one secret holds the storage settings
            assert "optional" not in env["TRAINYARD_STORAGE_PATH"]["valueFrom"]["secretKeyRef"]


def test_rayjob_runs_the_retrain_pipeline_and_cleans_up(manifests):
    from pipelines import list_pipelines

    job = manifests["rayjob.yaml"]["spec"]
    argv = shlex.split(job["entrypoint"])
    assert argv[:3] == ["python", "-m", "flows.retrain"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    defined = set(re.findall(r'add_argument\("(--[\w-]+)"', _read("flows", "retrain.py")))
    assert set(flags) <= defined, f"flags {set(flags) - defined} are not flows.retrain's"
    assert flags["--pipeline"] in list_pipelines()
    assert "--storage" not in flags  # storage comes from TRAINYARD_STORAGE_PATH (the secret)
    assert job["shutdownAfterJobFinishes"] is True


# --- Airflow ----------------------------------------------------------------------------
def _env_file() -> dict:
    out = {}
    for line in _read("deploy", "airflow", "airflow.env").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and key == key.strip() and key.isupper(), f"bad line {line!r}"
            assert not (value.startswith(('"', "'"))), f"{key}: env-file values are unquoted"
            out[key] = value
    return out


def test_airflow_env_points_a_dag_bundle_at_dags():
    env = _env_file()
    bundles = json.loads(env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    assert [b["classpath"] for b in bundles] == [
        "airflow.dag_processing.bundles.local.LocalDagBundle"]
    assert os.path.basename(bundles[0]["kwargs"]["path"]) == "dags"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert int(env["AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY"]) > 0
    assert env["TRAINYARD_STORAGE_PATH"].startswith("s3://")
    assert not {k for k in env if k.startswith("AWS_")}, "credentials do not go in this file"
    from pipelines import list_pipelines

    chosen = env["TRAINYARD_AIRFLOW_PIPELINES"]  # empty: every pipeline found
    assert not chosen or set(chosen.split(",")) <= set(list_pipelines())


def test_airflow_requirements_install_the_project_with_existing_extras(pyproject):
    lines = [line.strip() for line in _read("deploy", "airflow", "requirements.txt").splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(lines) == 1 and lines[0].startswith(".[")
    extras = set(_extras(lines[0]))
    assert extras <= set(pyproject["project"]["optional-dependencies"])
    assert {"airflow", "torch", "xgboost", "sklearn"} <= extras
    assert "pip install -c constraints.txt -r deploy/airflow/requirements.txt" in _read(
        "deploy", "airflow", "requirements.txt")


# --- Prefect ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prefect_deployments() -> dict:
    yaml = pytest.importorskip("yaml")
    return {d["name"]: d for d in yaml.safe_load(_read("deploy", "prefect.yaml"))["deployments"]}


def test_batch_predict_deployments_run_on_each_promotion_of_their_model(prefect_deployments):
    """Each ``batch-predict-<pipeline>`` deployment has a trigger Prefect accepts, on the
    event ``promote_task`` emits for that pipeline's alias, whose parameters render (as
    the server renders them) to the promoted checkpoint, and which the flow takes."""
    pytest.importorskip("prefect")
    import copy
    import inspect

    from prefect.events import DeploymentTriggerTypes
    from prefect.server.events.actions import RunDeployment
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate
    from pydantic import TypeAdapter

    from flows.batch_predict import batch_predict
    from tasks.prefect import PROMOTED_EVENT, model_resource_id

    predicts = {n: d for n, d in prefect_deployments.items() if n.startswith("batch-predict-")}
    assert predicts
    accepted = set(inspect.signature(batch_predict.fn).parameters)
    for name, deployment in predicts.items():
        assert deployment["entrypoint"] == "flows/batch_predict.py:batch_predict"
        pipeline = deployment["parameters"]["pipeline"]
        alias = deployment["parameters"]["alias"]
        [trigger] = deployment["triggers"]
        TypeAdapter(DeploymentTriggerTypes).validate_python(trigger)  # what `prefect deploy` does
        assert trigger["match"]["prefect.resource.id"] == model_resource_id(pipeline, alias)
        assert trigger["expect"] == [PROMOTED_EVENT]
        params = copy.deepcopy(trigger["parameters"])
        assert set(params) <= accepted, f"{name}: the flow does not take {set(params) - accepted}"
        RunDeployment._upgrade_v1_templates(params)
        payload = {"checkpoint_uri": "s3://b/ty/runs/r/checkpoint_000004", "storage": None}
        rendered = hydrate(params, HydrationContext(
            render_jinja=True, raise_on_error=True, jinja_context={"event": {"payload": payload}}))
        assert rendered == {"pipeline": pipeline, "alias": alias,
                            "checkpoint_uri": payload["checkpoint_uri"]}
