"""The modules of ``engine`` and of ``tasks`` form no import cycle.

Every ``import`` statement in every module under ``engine/`` (and ``tasks/``) counts: at
module level, in functions and methods, and below the other code (where a cycle would
otherwise hide).
Imports under ``if TYPE_CHECKING:`` count too (a cycle a type checker follows is a cycle
in the design; a helper that takes its caller as a parameter names it by a Protocol).
Names given as strings do not (the predictor registry's ``"module:Class"`` entries are
plugins looked up by name). Imports of anything outside the package walked (third-party packages, and
``engine`` from ``tasks``) are left out.

The engine's storage imports nothing of the engine above it: it is the bottom of a
step's walk. The layer rules between the top-level packages (``tasks``, ``flows``,
``dags`` …, a step's walk from a flow down to the engine) are
import-linter contracts in ``pyproject.toml`` (``lint-imports``, run by ``make test``).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

REPO = Path(__file__).resolve().parents[3]
PACKAGE = "engine"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules(package: str = PACKAGE) -> Dict[str, Path]:
    """Every module of the engine package (or ``package``): dotted name -> file."""
    out = {}
    for root, dirs, files in os.walk(REPO / package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(root) / name
                out[_module_name(path)] = path
    return out


def _import_nodes(node: ast.AST) -> Iterator[ast.stmt]:
    """Every import statement below ``node``, at any depth (``if TYPE_CHECKING:`` bodies,
    functions and the bottom of a module included)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        else:
            yield from _import_nodes(child)


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The engine module that importing ``name`` runs last (its longest known prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imported(module: str, node: ast.stmt, modules: Dict[str, Path]) -> Set[str]:
    names: List[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importing module's package
            is_pkg = modules[module].name == "__init__.py"
            anchor = module.split(".")[: None if is_pkg else -1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        # ``from pkg import sub`` depends on the submodule ``pkg.sub`` when there is
        # one (the package itself is always initialised first: no edge to it), else
        # on the module that defines the name.
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                 for alias in node.names]
    package = module.split(".")[0]
    found = {_resolve(n, modules) for n in names if n.split(".")[0] == package}
    found.discard(None)
    found.discard(module)
    return found  # type: ignore[return-value]


def import_graph(package: str = PACKAGE) -> Dict[str, Set[str]]:
    """Module -> the modules of its own package (``engine``) its import statements name."""
    modules = engine_modules(package)
    graph: Dict[str, Set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = set()
        for node in _import_nodes(tree):
            graph[module] |= _imported(module, node, modules)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle as a path ``[a, b, …, a]``, or None (depth-first search)."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_walker_sees_imports_in_functions_type_checking_and_at_the_bottom():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = ("from typing import TYPE_CHECKING\nimport engine.config\n"
              "if TYPE_CHECKING:\n    import engine.result\n"
              "def f():\n    from engine import checkpoint\n"
              "from engine.exceptions import ConfigError\n")
    modules = engine_modules()
    seen: Set[str] = set()
    for node in _import_nodes(ast.parse(source)):
        seen |= _imported("engine.session", node, modules)
    assert seen == {"engine.config", "engine.result", "engine.checkpoint",
                    "engine.exceptions"}


def test_engine_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50, "the walker found too few engine modules"
    cycle = find_cycle(graph)
    assert cycle is None, (
        "Import cycle inside engine/: " + " -> ".join(cycle or [])
        + ". Move what both sides need into a lower module (see engine/predictor.py, "
        "engine/preprocessors.py) instead of hiding the cycle in a function.")


def test_config_imports_nothing_above_it():
    # RunConfig and friends are what every other engine module reads: they may use the
    # constants, the exceptions and leaf helpers, nothing that could import them back.
    allowed = {"engine.constants", "engine.exceptions", "engine._internal.storage.uris"}
    graph = import_graph()
    assert graph["engine.config"] <= allowed, sorted(graph["engine.config"] - allowed)
    for leaf in allowed:
        assert graph[leaf] <= {"engine.constants", "engine.exceptions"}, (leaf, graph[leaf])


def test_tasks_has_no_import_cycle():
    # The packages of tasks (steps, sources, validation, registry, ray_jobs, prefect,
    # airflow) import each other one way only: registry -> steps -> sources -> registry
    # is the circle the reshape of issue 42 took apart.
    graph = import_graph("tasks")
    assert len(graph) > 40, "the walker found too few tasks modules"
    assert "tasks.registry.aliases" in graph and "tasks.steps.promotion" in graph
    cycle = find_cycle(graph)
    assert cycle is None, (
        "Import cycle inside tasks/: " + " -> ".join(cycle or [])
        + ". Put what both sides need in the package below them (a registry question in "
        "tasks/registry/, a path helper in tasks/layout.py) instead of importing upwards "
        "from a function.")


def test_storage_is_the_bottom_of_a_steps_walk():
    # A step's parameters go down from a flow to the engine's storage (the layers
    # contract in pyproject.toml covers flows -> tasks -> pipelines -> engine): the
    # storage modules, public and internal, import nothing of the engine above them.
    graph = import_graph()
    storage = {m for m in graph
               if m == "engine.storage" or m.startswith("engine._internal.storage")}
    assert "engine._internal.storage.uris" in storage and len(storage) > 3, storage
    below = storage | {"engine.constants", "engine.exceptions", "engine._internal"}
    climbs = {m: sorted(graph[m] - below) for m in sorted(storage) if graph[m] - below}
    assert not climbs, (
        f"Storage modules import engine modules above them: {climbs}. Pass what storage "
        "needs in as an argument instead.")


def test_no_test_module_imports_another():
    """What two test modules share (helpers, fixtures) lives in tests/support: a test
    module imported by another runs its module-level code, and its fixtures, twice."""
    graph = import_graph("tests")
    leaf = lambda name: name.rsplit(".", 1)[-1]  # noqa: E731
    shared = sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                    if leaf(d).startswith("test_"))
    assert shared == [], shared
