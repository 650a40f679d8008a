"""Settings in one place: every ``TRAINYARD_*`` variable is declared in
``engine/constants.py``, engine code names them through its constants, and the settings
guide's table (docs/guides/settings.md) is the one generated from the declarations."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Dict, Set

from engine import constants

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bTRAINYARD_[A-Z0-9_]*[A-Z0-9]\b")
TEXT_SUFFIXES = (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".env", ".txt", ".cfg",
                 ".ini", ".json")
TEXT_NAMES = ("Makefile", "Dockerfile")
SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".pytest_cache"}


def _text_files():
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name.endswith(TEXT_SUFFIXES) or name in TEXT_NAMES:
                yield Path(root) / name


def names_used() -> Dict[str, Set[str]]:
    """``TRAINYARD_*`` name -> the files (relative) that mention it."""
    out: Dict[str, Set[str]] = {}
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for name in NAME.findall(text):
            out.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return out


def test_every_trainyard_variable_is_declared_in_constants():
    used = names_used()
    undeclared = {n: sorted(files) for n, files in used.items() if n not in constants.SETTINGS}
    assert not undeclared, (
        f"Declare these in engine/constants.py with _setting(name, default, description) "
        f"and rerun python scripts/gen_settings_table.py: {undeclared}")


def test_engine_code_names_variables_through_constants():
    # An env var spelled out as a string literal in engine code is a second place that
    # declares it: use the *_ENV_VAR constant (docstrings that mention a name are fine).
    spelled = []
    for path in sorted((REPO / "engine").rglob("*.py")):
        if path.name == "constants.py" and path.parent.name == "engine":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and NAME.fullmatch(node.value):
                spelled.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value}")
    assert not spelled, spelled


def test_docs_settings_table_is_the_generated_one():
    page = (REPO / "docs" / "guides" / "settings.md").read_text(encoding="utf-8")
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in page and end in page, "docs/guides/settings.md lost its settings markers"
    shown = page[page.index(begin) + len(begin):page.index(end)]
    assert shown == constants.settings_table(), (
        "docs/guides/settings.md's table is stale: run python scripts/gen_settings_table.py")


def test_settings_table_rows():
    table = constants.settings_table().splitlines()
    assert table[0] == "| Variable | Default | Read by | What it does |"
    assert len(table) == 2 + len(constants.SETTINGS)
    row = next(r for r in table if "`TRAINYARD_STORAGE_RETRY_S`" in r)
    assert row.startswith("| `TRAINYARD_STORAGE_RETRY_S` | `120.0` | engine | Seconds")
    setting = constants.SETTINGS[constants.STORAGE_RETRY_ENV_VAR]
    assert setting.default == constants.DEFAULT_STORAGE_RETRY_S


def test_the_scan_finds_names_in_prose_and_code():
    p = "TRAINYARD"  # spelled apart, or the scan above would find these names here
    text = f"set ${p}_A_B_S=1, os.environ['{p}_C'] or {p}_* (a pattern)"
    assert NAME.findall(text) == [f"{p}_A_B_S", f"{p}_C"]
