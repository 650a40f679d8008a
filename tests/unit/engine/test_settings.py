"""Settings in one place: every ``TRAINYARD_*`` variable is declared in
``engine/constants.py``, engine code names them through its constants, and the settings
guide's table (docs/guides/settings.md) is the one generated from the declarations."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Dict, Set

import pytest

from engine import constants

REPO = Path(__file__).resolve().parents[3]
NAME = re.compile(r"\bTRAINYARD_[A-Z0-9_]*[A-Z0-9]\b")
TEXT_SUFFIXES = (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".env", ".txt", ".cfg",
                 ".ini", ".json")
TEXT_NAMES = ("Makefile", "Dockerfile")
# site/: what `make docs` builds from docs/ (ignored by git).
SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".pytest_cache", "site"}


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


# The suite's and the build's own variables: declared where they are read, not among the
# engine's settings, and used nowhere else.
OUTSIDE_THE_ENGINE = {
    "TRAINYARD_LOAD_FITS": "tests/README.md",
    "TRAINYARD_TEST_TIMELINE": "tests/README.md",
    "TRAINYARD_WHEEL_CACHE": "scripts/install_horovod.sh",
}
OUTSIDE_USED_IN = ("tests/", "scripts/", "docs/", "Makefile", ".ci/")


def test_every_trainyard_variable_is_declared_in_constants():
    used = names_used()
    undeclared = {n: sorted(files) for n, files in used.items()
                  if n not in constants.SETTINGS and n not in OUTSIDE_THE_ENGINE}
    assert not undeclared, (
        f"Declare these in engine/constants.py with _setting(name, default, description) "
        f"and rerun python scripts/gen_settings_table.py: {undeclared}")


def test_the_suites_and_the_builds_variables_stay_theirs():
    used = names_used()
    for name, declared_in in OUTSIDE_THE_ENGINE.items():
        assert name not in constants.SETTINGS
        assert name in (REPO / declared_in).read_text(encoding="utf-8"), declared_in
        elsewhere = sorted(f for f in used.get(name, ()) if not f.startswith(OUTSIDE_USED_IN))
        assert not elsewhere, f"{name} is the suite's or the build's, used in {elsewhere}"


def test_every_setting_parses_its_default_and_rejects_what_it_does_not_take(monkeypatch):
    from engine.exceptions import ConfigError, SettingError

    bad = {"int": "1.5x", "float": "soon", "bool": "maybe", "choice": "cluster"}
    for setting in constants.SETTINGS.values():
        monkeypatch.delenv(setting.name, raising=False)
        assert constants.get(setting.name) == setting.default, setting.name
        assert constants.given(setting.name) is None
        if setting.kind == "str":
            monkeypatch.setenv(setting.name, "  some value ")
            assert constants.get(setting.name) == "some value"
            continue
        monkeypatch.setenv(setting.name, "  ")  # blank: the default
        assert constants.get(setting.name) == setting.default, setting.name
        monkeypatch.setenv(setting.name, bad[setting.kind])
        with pytest.raises(SettingError) as err:
            constants.get(setting.name)
        message = str(err.value)
        assert message.startswith(f"{setting.name}={bad[setting.kind]!r} is not valid")
        assert setting.expected() in message and f"e.g. {setting.name}=" in message
        assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)
        # The example the message gives is a value the setting takes.
        example = message.split(f"e.g. {setting.name}=", 1)[1].split(",", 1)[0]
        monkeypatch.setenv(setting.name, example)
        constants.get(setting.name)


@pytest.mark.parametrize("name, raw, value", [
    ("TRAINYARD_RUN_LEASE_S", "15", 15.0), ("TRAINYARD_RAY_NUM_CPUS", " 6 ", 6),
    ("TRAINYARD_CHDIR_TO_TRIAL_DIR", "No", False), ("TRAINYARD_CHDIR_TO_TRIAL_DIR", "on", True),
    ("TRAINYARD_EXECUTION", "RAY_JOB", "ray_job"),
    ("TRAINYARD_DISABLE_DEFAULT_LOGGERS", "true", True),
])
def test_values_parse_to_their_type(monkeypatch, name, raw, value):
    monkeypatch.setenv(name, raw)
    assert constants.get(name) == value and type(constants.get(name)) is type(value)
    assert constants.given(name) == value


@pytest.mark.parametrize("name, raw", [
    ("TRAINYARD_RUN_LEASE_S", "0"), ("TRAINYARD_RUN_LEASE_S", "nan"),
    ("TRAINYARD_RAY_NUM_CPUS", "0"), ("TRAINYARD_RAY_WORKER_NICENESS", "20"),
    ("TRAINYARD_STORAGE_RETRY_S", "-1"), ("TRAINYARD_RAY_JOB_POLL_S", "0.01"),
    ("TRAINYARD_HEALTH_CHECK_TIMEOUT_S", "inf"),
])
def test_numbers_outside_their_range_are_refused(monkeypatch, name, raw):
    from engine.exceptions import SettingError

    monkeypatch.setenv(name, raw)
    with pytest.raises(SettingError, match=f"^{name}="):
        constants.get(name)


def test_the_engine_reads_a_bad_value_as_one_clear_error(monkeypatch):
    """Where the engine reads a setting, a bad value is the same SettingError: here the
    run lease's length, read when a fit takes its run."""
    from engine._internal.run_state import lease
    from engine.exceptions import SettingError

    monkeypatch.setenv("TRAINYARD_RUN_LEASE_S", "1m")
    with pytest.raises(SettingError, match="TRAINYARD_RUN_LEASE_S='1m' is not valid"):
        lease.lease_seconds()


def test_an_undeclared_name_says_how_to_declare_it():
    with pytest.raises(KeyError, match="declare it in engine/constants.py"):
        constants.get("TRAINYARD_" + "NO_SUCH_SETTING")


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
    assert table[0] == "| Variable | Takes | Default | Read by | What it does |"
    assert len(table) == 2 + len(constants.SETTINGS)
    row = next(r for r in table if "`TRAINYARD_STORAGE_RETRY_S`" in r)
    assert row.startswith("| `TRAINYARD_STORAGE_RETRY_S` | a number >= 0 | `120.0` | engine "
                          "| Seconds")
    setting = constants.SETTINGS[constants.STORAGE_RETRY_ENV_VAR]
    assert setting.default == constants.DEFAULT_STORAGE_RETRY_S


def test_the_scan_finds_names_in_prose_and_code():
    p = "TRAINYARD"  # spelled apart, or the scan above would find these names here
    text = f"set ${p}_A_B_S=1, os.environ['{p}_C'] or {p}_* (a pattern)"
    assert NAME.findall(text) == [f"{p}_A_B_S", f"{p}_C"]
