"""The README and the docs site stay what a user needs: short, undated, linked, runnable.

``make test`` also builds the site with ``mkdocs build --strict`` (broken links, anchors and
API references fail there); these checks are the cheap ones that need no build: the
README's size and content, relative links in README.md and docs/ (the README is read on
GitHub, outside MkDocs), the README's code, and the performance page's hook.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# What a measurement diary says; a README for users says none of it.
DIARY = re.compile(r"on a (fast|slow|quiet|busy) (day|VM|machine)|load average|development VM|"
                   r"\b\d+(\.\d+)? ?s \(median|\btook \d", re.I)


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _doc_pages() -> List[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (links and dates in code are code)."""
    return FENCE.sub("", text)


def _code_blocks(text: str, language: str) -> List[str]:
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == language]


def _slug(heading: str) -> str:
    """The anchor MkDocs' toc and GitHub give a heading (lowercase, punctuation dropped)."""
    text = re.sub(r"`|\*", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return re.sub(r"[\s]+", "-", text.strip())


def _anchors(page: Path) -> set:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _prose(
        page.read_text(encoding="utf-8")), re.M)}


def _relative_links(page: Path) -> Iterator[Tuple[str, Path, str]]:
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        yield target, (page.parent / path).resolve(), anchor


def test_readme_is_short():
    lines = _readme().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move the explanation "
        "to the page of docs/ where it belongs and link it.")


def test_readme_has_no_dated_measurements():
    text = _readme()
    dated = DATE.findall(text) + [m.group(0) for m in DIARY.finditer(text)]
    assert not dated, (f"README.md reads like a measurement diary: {dated}; measurements "
                       "live on docs/performance.md (from bench/results/latest.json)")


def test_docs_prose_has_no_dated_entries():
    dated = [f"{p.relative_to(REPO)}: {d}" for p in _doc_pages()
             for d in DATE.findall(_prose(p.read_text(encoding="utf-8")))]
    assert not dated, f"dated entries in the docs (say it as a plain statement): {dated}"


def test_readme_shows_the_two_commands():
    shell = "\n".join(_code_blocks(_readme(), "bash"))
    assert re.search(r"^make run\b", shell, re.M) and re.search(r"^make test\b", shell, re.M)


@pytest.mark.parametrize("page", [README] + _doc_pages(),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target, path, anchor in _relative_links(page):
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and _slug(anchor) not in _anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)} links to what is not there: {broken}"


def test_readme_python_compiles():
    blocks = _code_blocks(_readme(), "python")
    assert len(blocks) >= 3, "the quickstart, a Prefect flow and an Airflow DAG"
    for i, code in enumerate(blocks):
        compile(code, f"README.md python block {i}", "exec")


def test_docs_python_compiles():
    for page in _doc_pages():
        for i, code in enumerate(_code_blocks(page.read_text(encoding="utf-8"), "python")):
            compile(code, f"{page.relative_to(REPO)} python block {i}", "exec")


def test_quickstart_is_the_getting_started_one_and_its_imports_exist():
    # The quickstart itself starts Ray, which a unit test does not; what it imports must
    # exist, and the getting-started page shows the same code.
    quickstart = _code_blocks(_readme(), "python")[0]
    assert quickstart in _code_blocks((DOCS / "index.md").read_text(encoding="utf-8"),
                                      "python")
    imports = "\n".join(line for line in quickstart.splitlines()
                        if line.startswith(("from ", "import ")))
    exec(compile(imports, "README.md quickstart imports", "exec"), {})


OWN_PACKAGES = ("engine", "tasks", "pipelines", "flows", "dags")


def _own_imports(code: str) -> Iterator[Tuple[str, str]]:
    """``(module, name)`` for each import of trainyard's own packages in ``code`` (name
    empty for ``import module``)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in OWN_PACKAGES:
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OWN_PACKAGES:
                    yield alias.name, ""


def _names_defined_by(module: str) -> Optional[set]:
    """What ``module`` defines, read from its source without importing it (a framework's
    import costs seconds): top-level bindings, and every string constant, which covers
    ``__all__`` and the lazy tables of ``engine`` and ``tasks``. None: no such module."""
    try:
        spec = importlib.util.find_spec(module)  # imports the parent packages only
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_every_trainyard_name_the_docs_import_exists():
    # What a user copies from the README or a page must import: a module that moved, or a
    # step renamed, fails here rather than in the user's first run.
    missing = []
    for page in [README] + _doc_pages():
        for code in _code_blocks(page.read_text(encoding="utf-8"), "python"):
            for module, name in _own_imports(code):
                names = _names_defined_by(module)
                if names is None:
                    missing.append(f"{page.relative_to(REPO)}: no module {module}")
                elif name and name not in names and \
                        _names_defined_by(f"{module}.{name}") is None:
                    missing.append(f"{page.relative_to(REPO)}: from {module} import {name}")
    assert not missing, "\n".join(missing)


def test_the_readmes_flow_and_dag_are_the_guides_ones():
    blocks = _code_blocks(_readme(), "python")
    for guide, marker in (("prefect.md", "from tasks.prefect import"),
                          ("airflow.md", "from tasks.airflow import")):
        code = next(b for b in blocks if marker in b)
        assert code in _code_blocks((DOCS / "guides" / guide).read_text(encoding="utf-8"),
                                    "python"), guide


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(node) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    nav = set(walk(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in _doc_pages()}
    assert pages == nav, f"not in the nav: {pages - nav}; missing files: {nav - pages}"


def _hook():
    spec = importlib.util.spec_from_file_location(
        "performance_hook", DOCS / "_hooks" / "performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Page:
    class file:  # noqa: N801 - the shape of mkdocs' Page.file
        src_uri = "performance.md"


def test_performance_page_renders_the_committed_results():
    hook = _hook()
    results = json.loads((REPO / "bench" / "results" / "latest.json").read_text("utf-8"))
    assert results["rows"] and "source" in results
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    out = hook.on_page_markdown(page, _Page, None, None)
    assert hook.TABLE_MARK not in out and hook.RUN_MARK not in out
    for row in results["rows"]:
        assert f"| {row['workload']}" in out
    assert "| empty_fit (5 reps) | wall_s (s) | 1.94 (1.61–2.55) |" in out


def test_performance_page_without_results_says_how_to_make_them(tmp_path, monkeypatch):
    hook = _hook()
    monkeypatch.setattr(hook, "RESULTS", tmp_path / "latest.json")
    out = hook.on_page_markdown((DOCS / "performance.md").read_text(encoding="utf-8"),
                                _Page, None, None)
    assert "make bench" in out and hook.TABLE_MARK not in out


@pytest.mark.parametrize("root", ["engine/_internal", "tasks"])
def test_the_code_map_names_every_package_and_module(root):
    # docs/architecture.md is the newcomer's map: a package or module added, moved or
    # renamed without the map following it fails here.
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for package in sorted(p for p in (REPO / root).iterdir()
                          if (p / "__init__.py").exists()):
        if f"`{package.name}/`" not in page:
            missing.append(f"{root}/{package.name}/")
        for module in sorted(package.glob("*.py")):
            if module.stem != "__init__" and not module.stem.startswith("_") \
                    and f"`{module.stem}`" not in page:
                missing.append(f"{root}/{package.name}/{module.name}")
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)
