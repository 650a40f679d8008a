"""Shipping a pipeline plugin's code to a Ray job (``ray_job`` mode).

A pipeline that is not part of trainyard (an entry point of the user's own distribution,
or ``$TRAINYARD_PIPELINES``) must be importable where the job runs. The step adds it to
the job's ``runtime_env``:

* ``py_modules`` with the module's local source tree when it is not an installed copy of
  a published release: a pipeline found through ``$TRAINYARD_PIPELINES``, or a
  distribution installed from a local path (editable or not, per its
  ``direct_url.json``). The job does not see that distribution's entry points, so the
  pipeline is named in the job's ``$TRAINYARD_PIPELINES`` as well.
* ``pip`` with ``name==version`` for a distribution installed from an index.

Nothing is added when the user's ``runtime_env`` covers it already (the same module in
``py_modules`` or in a local ``working_dir``, or the distribution in ``pip``/``uv``), nor
for trainyard's own pipelines, which the cluster's trainyard installation has.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from engine import constants
from engine.constants import PIPELINES_ENV_VAR
from engine.exceptions import ConfigError

logger = logging.getLogger("tasks.jobs")

# trainyard's own top-level packages: the cluster's trainyard installation has them.
OWN_PACKAGES = frozenset({"engine", "tasks", "pipelines", "flows", "dags"})
OWN_DISTRIBUTION = "trainyard"
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


@dataclass(frozen=True)
class Shipment:
    """What a job needs of one pipeline's code.

    Args:
        pipeline: The pipeline's name.
        target: Its ``module:attribute``.
        module: The top-level module that holds it.
        distribution: The installed distribution that declares it, if any.
        pip: ``name==version`` to install (an index release), else None.
        path: The local source tree (package directory or ``.py`` file) to send as
            ``py_modules``, else None.
    """

    pipeline: str
    target: str
    module: str
    distribution: Optional[str] = None
    pip: Optional[str] = None
    path: Optional[str] = None


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def shipment_for(entry: Any) -> Optional[Shipment]:
    """What a job needs of a pipeline's code; None for trainyard's own pipelines.

    Args:
        entry: The pipeline's ``pipelines.PipelineEntry``.

    Raises:
        ConfigError: the pipeline exists only in this process (``register_pipeline``).
    """
    if entry.target is None:
        raise ConfigError(
            f"Pipeline {entry.name!r} was registered with register_pipeline() in this "
            "process only, which a Ray job cannot see: declare it as an entry point of "
            f"an installed package or in ${PIPELINES_ENV_VAR}='{entry.name}=module:SPEC' "
            "(or run the step with execution='local').")
    module = entry.target.split(":", 1)[0].split(".", 1)[0]
    dist = entry.distribution
    if module in OWN_PACKAGES or canonical(dist or "") == OWN_DISTRIBUTION:
        return None
    pip = f"{dist}=={entry.version}" if dist and entry.version and \
        _local_source(dist) is None else None
    return Shipment(entry.name, entry.target, module, dist, pip,
                    None if pip else _module_path(module))


def _local_source(dist: str) -> Optional[str]:
    """The directory a distribution was installed from when that was a local path
    (``pip install [-e] ./pkg``: ``direct_url.json`` has a ``file://`` URL)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        raw = distribution(dist).read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        url = str(json.loads(raw or "{}").get("url", ""))
    except ValueError:
        return None
    return url[len("file://"):] if url.startswith("file://") else None


def _module_path(module: str) -> Optional[str]:
    """The module's source here: its package directory, or its ``.py`` file (None: not
    found)."""
    try:
        spec = importlib.util.find_spec(module)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return None
    if spec is not None and spec.submodule_search_locations:
        return os.path.realpath(list(spec.submodule_search_locations)[0])
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        return os.path.realpath(spec.origin)
    return None


# --- what the user's runtime_env covers already ----------------------------------------
def _pip_list(value: Any) -> List[str]:
    """The requirements of a runtime_env ``pip``/``uv`` value (a list, a dict with
    ``packages``, or the path of a local requirements file)."""
    if isinstance(value, dict):
        value = value.get("packages") or []
    if isinstance(value, str):
        try:
            with open(value, encoding="utf-8") as f:
                return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
        except OSError:
            return [value]
    return [str(v) for v in (value or [])]


def _conda_pip(value: Any) -> List[str]:
    deps = value.get("dependencies", []) if isinstance(value, dict) else []
    return [str(r) for d in deps if isinstance(d, dict) for r in d.get("pip", [])]


def covers_distribution(runtime_env: Dict[str, Any], dist: Optional[str]) -> bool:
    """Whether ``pip``, ``uv`` or conda's pip dependencies install ``dist``."""
    if not dist:
        return False
    reqs = (_pip_list(runtime_env.get("pip")) + _pip_list(runtime_env.get("uv"))
            + _conda_pip(runtime_env.get("conda")))
    names = {canonical(m.group(1)) for m in map(_REQ_NAME.match, reqs) if m}
    return canonical(dist) in names


def covers_module(runtime_env: Dict[str, Any], module: str,
                  path: Optional[str] = None) -> bool:
    """Whether ``py_modules`` holds the module (by name or path), or a local
    ``working_dir`` has it at its top."""
    for item in runtime_env.get("py_modules") or []:
        if not isinstance(item, str):
            item = getattr(item, "__name__", "")  # a module object
        base = os.path.basename(str(item).rstrip("/"))
        if base.endswith(".whl"):  # <distribution>-<version>-...whl
            base = canonical(base.split("-", 1)[0]).replace("-", "_")
        if base in (module, f"{module}.py", f"{module}.zip") or (
                path and os.path.realpath(str(item)) == path):
            return True
    wd = runtime_env.get("working_dir")
    return isinstance(wd, str) and "://" not in wd and (
        os.path.isdir(os.path.join(wd, module))
        or os.path.isfile(os.path.join(wd, f"{module}.py")))


# --- adding it --------------------------------------------------------------------------
def with_pipeline(runtime_env: Optional[Dict[str, Any]],
                  pipeline: Optional[str]) -> Optional[Dict[str, Any]]:
    """The job's runtime_env with the pipeline's code added where it is missing.

    Args:
        runtime_env: The user's runtime_env (not changed); None: the cluster's own.
        pipeline: The step's pipeline name; None (unknown) ships nothing.

    Raises:
        ConfigError: the pipeline cannot be shipped (see :func:`shipment_for`).
    """
    from pipelines import pipeline_entry

    entry = pipeline_entry(pipeline) if pipeline else None
    ship = shipment_for(entry) if entry is not None else None
    if ship is None:
        return runtime_env
    env = copy.deepcopy(runtime_env) if runtime_env else {}
    by_module = covers_module(env, ship.module, ship.path)
    if ship.pip and not by_module:
        if not covers_distribution(env, ship.distribution):
            _add_requirement(env, ship.pip)
        return env  # an installed distribution brings its entry points
    if not by_module and not covers_distribution(env, ship.distribution):
        if ship.path is None:
            raise ConfigError(
                f"Pipeline {ship.pipeline!r} lives in module {ship.module!r}, which this "
                "process cannot find as source to ship to the Ray job: install its "
                "package here, put its directory on PYTHONPATH, or ship it yourself in "
                "run['runtime_env'] (py_modules or working_dir).")
        env["py_modules"] = [*(env.get("py_modules") or []), ship.path]
        logger.info("Shipping pipeline %s to the Ray job: py_modules %s.", ship.pipeline,
                    ship.path)
    _name_in_job_env(env, ship)
    return env


def _add_requirement(env: Dict[str, Any], requirement: str) -> None:
    """Append to ``pip`` (or ``uv``, which Ray does not allow beside it)."""
    key = "uv" if "uv" in env else "pip"
    value = env.get(key)
    if key == "pip" and "conda" in env:
        logger.warning("Pipeline distribution %s is not in runtime_env's conda "
                       "environment, and Ray allows no 'pip' beside 'conda': add it to "
                       "the conda dependencies' pip list.", requirement)
        return
    if isinstance(value, dict):
        env[key] = {**value, "packages": [*_pip_list(value), requirement]}
    else:
        env[key] = [*_pip_list(value), requirement]
    logger.info("Shipping pipeline distribution %s to the Ray job (runtime_env %s).",
                requirement, key)


def _name_in_job_env(env: Dict[str, Any], ship: Shipment) -> None:
    """Code shipped as modules carries no entry points: name the pipeline in the job's
    ``$TRAINYARD_PIPELINES`` (beside what the user or this process set there)."""
    env_vars = dict(env.get("env_vars") or {})
    current = env_vars.get(PIPELINES_ENV_VAR, constants.given(PIPELINES_ENV_VAR) or "")
    items = [i.strip() for i in str(current).split(",") if i.strip()]
    if not any(i.partition("=")[0].strip() == ship.pipeline for i in items):
        items.append(f"{ship.pipeline}={ship.target}")
    env_vars[PIPELINES_ENV_VAR] = ",".join(items)
    env["env_vars"] = env_vars
