"""Where pipelines come from: entry points, ``$TRAINYARD_PIPELINES``, the built-in table.

A pipeline is a ``name → "module:ATTRIBUTE"`` pointer until someone asks for it, so finding
every pipeline imports no pipeline module (and no framework). Loading one imports its
module and checks what it finds; any failure is a :class:`PipelinePluginError` that names
the plugin and the fix, and never affects the other pipelines.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from engine import constants
from engine.constants import PIPELINES_ENV_VAR
from engine.exceptions import ConfigError

#: The entry-point group a distribution lists its pipelines in (``pyproject.toml``:
#: ``[project.entry-points."trainyard.pipelines"] churn = "churn_pipeline.pipeline:SPEC"``).
ENTRY_POINT_GROUP = "trainyard.pipelines"
#: Pipelines on the path but not installed: ``name=module:attr,name2=module2:attr2``.
#: trainyard's own pipelines. pyproject.toml lists the same as entry points; this table
#: keeps them found where the installed metadata predates those (a source checkout).
BUILTIN: Dict[str, str] = {
    "digits": "pipelines.digits:SPEC",
    "breast_cancer": "pipelines.breast_cancer:SPEC",
}
OWN_DISTRIBUTION = "trainyard"
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class PipelinePluginError(ConfigError):
    """A pipeline plugin cannot be used: it fails to import, its target is missing or is
    not a ``PipelineSpec``, or two plugins claim its name (the message says which and
    how to fix it)."""


@dataclass
class PipelineEntry:
    """One pipeline as discovery found it.

    Args:
        name: The pipeline's name.
        target: ``"module:attr"`` of its ``PipelineSpec`` (None: registered in-process).
        origin: Where it comes from, for people: ``"my-models 1.2"``,
            ``"$TRAINYARD_PIPELINES"``, ``"register_pipeline()"``.
        distribution, version: The installed distribution that lists it, if any.
        error: Why it cannot be used (a name clash, a malformed declaration), if so.
    """

    name: str
    target: Optional[str]
    origin: str
    distribution: Optional[str] = None
    version: Optional[str] = None
    error: Optional[str] = None
    others: List["PipelineEntry"] = field(default_factory=list)

    def where(self) -> str:
        """``origin (target)`` for messages."""
        return f"{self.origin} ({self.target})" if self.target else self.origin


# Entry points are read once per process (a scan of every installed distribution);
# refresh() re-reads them, e.g. after pip installed a plugin into a running process.
_ENTRY_POINTS: Optional[List[PipelineEntry]] = None


def refresh() -> None:
    """Forget the entry points read so far (the next lookup reads them again)."""
    global _ENTRY_POINTS
    _ENTRY_POINTS = None
    importlib.invalidate_caches()


def _entry_points() -> List[PipelineEntry]:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        from importlib.metadata import entry_points

        found = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            origin = f"{name} {version}" if name else "an entry point"
            found.append(PipelineEntry(ep.name, ep.value, origin, name, version))
        _ENTRY_POINTS = found
    return list(_ENTRY_POINTS)


def _own_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(OWN_DISTRIBUTION)
    except PackageNotFoundError:
        return "source checkout"


def _env_entries() -> List[PipelineEntry]:
    out = []
    origin = f"${PIPELINES_ENV_VAR}"
    for item in (constants.get(PIPELINES_ENV_VAR) or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, target = (s.strip() for s in item.partition("="))
        entry = PipelineEntry(name or item, target or None, origin)
        if not sep or not name or not _TARGET.match(target):
            entry.error = (f"{PIPELINES_ENV_VAR} item {item!r} is not name=module:attribute: "
                           f"write e.g. {PIPELINES_ENV_VAR}='churn=churn_pipeline.pipeline:SPEC'.")
        out.append(entry)
    return out


def candidates() -> List[PipelineEntry]:
    """Every declaration of a pipeline, before clashes are resolved: installed entry
    points, the built-in table where trainyard's installed metadata lacks it, and
    ``$TRAINYARD_PIPELINES``."""
    eps = _entry_points()
    own = {e.name for e in eps if _is_own(e) and BUILTIN.get(e.name) == e.target}
    # A stale installed record of trainyard's own (another target) loses to the code
    # that is running: the built-in table.
    out = [e for e in eps if not (_is_own(e) and e.name in BUILTIN and e.name not in own)]
    version = _own_version()
    for name, target in BUILTIN.items():
        if name not in own:
            out.append(PipelineEntry(name, target, f"{OWN_DISTRIBUTION} {version}",
                                     OWN_DISTRIBUTION, version))
    for entry in out:
        if entry.error is None and not _TARGET.match(entry.target or ""):
            entry.error = (f"The entry point {entry.name} = {entry.target!r} of {entry.origin} "
                           "is not 'module:attribute': fix it in that distribution's "
                           f"[project.entry-points.\"{ENTRY_POINT_GROUP}\"] and reinstall it.")
    return out + _env_entries()


def _is_own(entry: PipelineEntry) -> bool:
    return (entry.distribution or "").lower() == OWN_DISTRIBUTION


def discover() -> Dict[str, PipelineEntry]:
    """Every pipeline name → its entry; a name declared with two different targets is an
    entry whose ``error`` names both (the same target declared twice is one)."""
    out: Dict[str, PipelineEntry] = {}
    for entry in candidates():
        entry = dataclasses.replace(entry, others=[])  # the cached ones stay as read
        first = out.get(entry.name)
        if first is None:
            out[entry.name] = entry
        elif entry.target != first.target:
            first.others.append(entry)
    for entry in out.values():
        if entry.others:
            clash = PipelineEntry(entry.name, entry.target, entry.origin,
                                  entry.distribution, entry.version, others=entry.others)
            names = " and by ".join(e.where() for e in [entry, *entry.others])
            clash.error = (f"Pipeline name {entry.name!r} is defined by {names}: uninstall "
                           "one of them, or rename one (its entry-point name and its "
                           "PipelineSpec's name).")
            out[entry.name] = clash
    return out


def load(entry: PipelineEntry, spec_type: type) -> Any:
    """The ``PipelineSpec`` an entry points at.

    Raises:
        PipelinePluginError: the entry cannot be used (its message names the fix).
    """
    if entry.error:
        raise PipelinePluginError(entry.error)
    module_name, _, attr = (entry.target or "").partition(":")
    fix = _fix_hint(entry)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PipelinePluginError(
            f"Pipeline {entry.name!r} from {entry.where()} failed to import: "
            f"{type(exc).__name__}: {exc}. {fix}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            specs = _specs_in(obj, spec_type)
            has = f" (it has the PipelineSpec {', '.join(specs)})" if specs else ""
            raise PipelinePluginError(
                f"Pipeline {entry.name!r} from {entry.origin} points at {entry.target!r}, "
                f"but {module_name} has no attribute {attr!r}{has}. {fix}")
        obj = getattr(obj, part)
    if not isinstance(obj, spec_type):
        raise PipelinePluginError(
            f"Pipeline {entry.name!r} from {entry.where()} is a {type(obj).__name__}, not a "
            f"pipelines.PipelineSpec: point it at a PipelineSpec(...) object. {fix}")
    if obj.name != entry.name:
        raise PipelinePluginError(
            f"Pipeline {entry.name!r} from {entry.where()} is a PipelineSpec named "
            f"{obj.name!r}: use the same name in both places. {fix}")
    return obj


def _specs_in(module: Any, spec_type: type) -> List[str]:
    return sorted(k for k, v in vars(module).items() if isinstance(v, spec_type))


def _fix_hint(entry: PipelineEntry) -> str:
    if entry.origin.startswith("$"):
        return (f"Fix the module, or the item {entry.name}={entry.target} of "
                f"${PIPELINES_ENV_VAR}.")
    if entry.distribution:
        return (f"Fix the distribution {entry.distribution!r} (its "
                f"[project.entry-points.\"{ENTRY_POINT_GROUP}\"] or its code) and reinstall "
                f"it, or uninstall it: pip uninstall {entry.distribution}.")
    return "Fix the module it points at."


def loaded_summary(entry: PipelineEntry, spec: Any) -> Dict[str, Any]:
    """A JSON row for listings."""
    return {"name": entry.name, "origin": entry.origin, "target": entry.target,
            "distribution": entry.distribution, "version": entry.version,
            "framework": getattr(spec, "framework", None),
            "source": getattr(spec, "source", None),
            "metric": getattr(spec, "metric", None), "mode": getattr(spec, "mode", None),
            "description": getattr(spec, "description", None), "error": None}

