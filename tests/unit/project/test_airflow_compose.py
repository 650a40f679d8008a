"""deploy/airflow/docker-compose.yaml, checked without Docker: the four Airflow components
on the project image, one metadata database, one JWT secret, the Ray head and the storage
every task reaches, and the settings and connection id the code reads.

The Airflow package is located, not imported (the test process never imports Airflow)."""

from __future__ import annotations

import importlib.util
import os
import shlex

import pytest

from engine import constants

REPO = os.path.abspath(os.path.join(__file__, *[os.pardir] * 4))
HERE = os.path.join(REPO, "deploy", "airflow")
COMPONENTS = {"airflow-scheduler": "scheduler", "airflow-dag-processor": "dag-processor",
              "airflow-triggerer": "triggerer", "airflow-api-server": "api-server"}


@pytest.fixture(scope="module")
def compose() -> dict:
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(HERE, "docker-compose.yaml")) as fh:
        return yaml.safe_load(fh)


def _env_file() -> dict:
    out = {}
    with open(os.path.join(HERE, "airflow.env")) as fh:
        for line in fh:
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.rstrip("\n").partition("=")
                out[key] = value
    return out


def _env(service: dict) -> dict:
    """What the container sees: the env files, then ``environment`` over them."""
    env = {}
    for name in service.get("env_file") or []:
        assert name == "airflow.env", name
        env.update(_env_file())
    env.update({k: str(v) for k, v in (service.get("environment") or {}).items()})
    return env


def _argv(service: dict) -> list:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def test_each_airflow_component_runs_an_existing_airflow_command(compose):
    spec = importlib.util.find_spec("airflow")
    if spec is None:
        pytest.skip("Airflow 3 is needed: pip install 'trainyard[airflow]'")
    commands = os.path.join(spec.submodule_search_locations[0], "cli", "commands")
    services = compose["services"]
    for name, component in COMPONENTS.items():
        argv = _argv(services[name])
        assert argv[:2] == ["airflow", component], (name, argv)
        module = component.replace("-", "_") + "_command.py"
        assert os.path.exists(os.path.join(commands, module)), f"airflow {component}?"
    init = " ".join(_argv(services["airflow-init"]))
    assert "airflow db migrate" in init


def test_components_share_the_project_image_database_and_secret(compose):
    services = compose["services"]
    build = services["airflow-scheduler"]["build"]
    context = os.path.normpath(os.path.join(HERE, build["context"]))
    assert context == REPO and os.path.exists(os.path.join(context, build["dockerfile"]))
    airflow = [services[n] for n in [*COMPONENTS, "airflow-init"]]
    assert len({s["image"] for s in airflow} | {services["ray-head"]["image"]}) == 1
    envs = [_env(s) for s in airflow]
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__API_AUTH__JWT_SECRET",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "TRAINYARD_STORAGE_PATH",
                "RAY_ADDRESS", "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"):
        assert len({e.get(key) for e in envs}) == 1 and envs[0].get(key), key
    env = envs[0]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    db = services["postgres"]["environment"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"postgresql+psycopg://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}@postgres:5432/"
        f"{db['POSTGRES_DB']}")
    for name in COMPONENTS:
        needs = services[name]["depends_on"]["airflow-init"]["condition"]
        assert needs == "service_completed_successfully", name


def test_tasks_reach_the_api_server_the_ray_head_and_the_storage(compose):
    services = compose["services"]
    env = _env(services["airflow-scheduler"])
    api = _argv(services["airflow-api-server"])
    port = api[api.index("--port") + 1]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == \
        f"http://airflow-api-server:{port}/execution/"
    assert f"{port}:{port}" in services["airflow-api-server"]["ports"]
    head = _argv(services["ray-head"])
    assert head[:3] == ["ray", "start", "--head"] and "--block" in head
    host, _, ray_port = env["RAY_ADDRESS"].partition(":")
    assert host == "ray-head" and f"--port={ray_port}" in head
    storage = env["TRAINYARD_STORAGE_PATH"]
    for name in [*COMPONENTS, "ray-head"]:
        mounts = [v.split(":")[1] for v in services[name]["volumes"]]
        assert storage in mounts, f"{name} does not mount {storage}"
    assert _env(services["ray-head"])["TRAINYARD_STORAGE_PATH"] == storage


def test_settings_and_the_webhook_connection_are_the_ones_the_code_reads(compose):
    env = _env(compose["services"]["airflow-scheduler"])
    trainyard = {k for k in env if k.startswith("TRAINYARD_")}
    assert trainyard <= set(constants.SETTINGS), trainyard - set(constants.SETTINGS)
    assert {constants.AIRFLOW_PIPELINES_ENV_VAR, constants.RETRAIN_SCHEDULE_ENV_VAR,
            constants.AIRFLOW_WEBHOOK_CONN_ENV_VAR} <= trainyard
    conn_id = env[constants.AIRFLOW_WEBHOOK_CONN_ENV_VAR]
    assert conn_id == constants.SETTINGS[constants.AIRFLOW_WEBHOOK_CONN_ENV_VAR].default
    with open(os.path.join(HERE, "docker-compose.yaml")) as fh:
        assert f"airflow connections add {conn_id} " in fh.read()
    with open(os.path.join(HERE, "airflow.env")) as fh:
        assert f"AIRFLOW_CONN_{conn_id.upper()}=" in fh.read()
    users = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert users.split(":")[0] in " ".join(_argv(compose["services"]["airflow-init"]))
