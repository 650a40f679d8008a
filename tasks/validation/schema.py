"""Validate a data set before training: its schema (pandera) and its drift from the data
the production model was trained on.

    report = validate(data, pipeline="digits")           # the pipeline's schema and drift
    report = validate(data, schema={"columns": {"age": {"type": "int", "min": 0}}},
                      checks={"reference": old_data, "drift": {"threshold": 0.1}})

A schema is JSON, so that it fits a pipeline spec, a DAG param or a CLI flag::

    {"columns": {"<name>": {"type": "float64" | "int" | "float" | "number" | "string" |
                                    "bool" | "date" | "timestamp" | <Arrow type name>,
                            "nullable": false, "min": 0, "max": 16,
                            "isin": [0, 1, 2], "required": true}},
     "strict": false}           # true: columns the schema does not name are an error

Hard checks (a missing column, a wrong type, nulls where none are allowed, a value out of
range, a category that is not allowed, too few rows) fail: :class:`DataValidationError`
names each failing column with example values and rows. Drift beyond the threshold is a
warning unless the drift settings say ``"fail": true``. Either way a report is written
(``report.md`` and ``report.json``, beside the data set unless ``output_dir`` is given)
before anything fails, and no Ray worker starts: validation runs in the calling process,
streaming the data set batch by batch.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from engine.exceptions import ConfigError
from engine.storage import Storage, join, redact
from tasks.sources import files
from tasks.validation import drift
from tasks.refs import DatasetRef, _check_json, _Ref

logger = logging.getLogger("tasks")

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
_COLUMN_KEYS = {"type", "nullable", "min", "max", "isin", "required"}
_CHECK_KEYS = {"min_rows", "drift", "reference"}
_MAX_EXAMPLES = 5
_MAX_LINES = 12  # failure lines in an error message (the report has them all)
# Arrow type names a schema may use for the same thing.
_ALIASES = {"float64": "double", "float32": "float", "float16": "halffloat", "str": "string",
            "large_string": "string", "boolean": "bool"}


class DataValidationError(ConfigError):
    """A data set failed a hard check (or drifted, where drift is set to fail).

    Not retried by the orchestrator adapters: the same data fails the same way. The
    message names the failing columns and values; ``report`` holds the whole report."""

    def __init__(self, message: str, report: Optional["ValidationReport"] = None) -> None:
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> Tuple[Any, ...]:  # pickles across processes and Ray
        return (type(self), (str(self), self.report))


@dataclass
class ValidationReport(_Ref):
    """What :func:`validate` found (JSON values only: it travels through XCom).

    Attributes:
        dataset: The data set checked (unchanged: pass it on to ``split``).
        passed: No hard check failed and no drift is set to fail.
        failures: One entry per failing check: ``column``, ``check``, ``count``,
            ``examples`` (values), ``rows`` (row numbers).
        drift: One row per compared column (``tasks.validation.drift.drift_table``).
        warnings: Lines a person should read (drift, a skipped comparison).
        reference: The reference data set's URI and fingerprint, if drift was checked.
        report_uri: The directory holding ``report.md`` and ``report.json``.
    """

    dataset: DatasetRef
    passed: bool
    failures: List[Dict[str, Any]] = field(default_factory=list)
    drift: List[Dict[str, Any]] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    reference: Dict[str, Any] = field(default_factory=dict)
    report_uri: str = ""
    drift_fails: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.dataset, dict):
            self.dataset = DatasetRef.from_dict(self.dataset)
        for name in ("failures", "drift", "warnings", "reference"):
            _check_json("ValidationReport", name, getattr(self, name))

    @classmethod
    def _decode_field(cls, name: str, value: Any) -> Any:
        return DatasetRef.from_dict(value) if name == "dataset" else value

    @property
    def drifted(self) -> List[str]:
        return [row["column"] for row in self.drift if row.get("drifted")]

    def summary(self) -> str:
        """One paragraph: the outcome, each failing column with examples, drift."""
        head = (f"Data set {self.dataset.name or 'data'!r} ({self.dataset.num_rows} rows, "
                f"{self.dataset.uri}) {'passed' if self.passed else 'FAILED'} validation")
        lines = [head + (f"; report: {self.report_uri}" if self.report_uri else "") + "."]
        lines += [f"- {_failure_line(f)}" for f in self.failures[:_MAX_LINES]]
        if len(self.failures) > _MAX_LINES:
            lines.append(f"- ... and {len(self.failures) - _MAX_LINES} more failing checks "
                         "(see the report)")
        for w in self.warnings:  # drift lines are errors where drift is set to fail
            kind = "error" if self.drift_fails and w.startswith("column ") else "warning"
            lines.append(f"- {kind}: {w}")
        return "\n".join(lines)

    def raise_for_status(self) -> None:
        """Raise :class:`DataValidationError` with :meth:`summary` if it did not pass."""
        if self.passed:
            return
        fixes = []
        if self.failures:
            fixes.append("fix the data, or change the schema (PipelineSpec.data_schema, "
                         "or validate(schema=...))")
        if self.drift_fails:
            fixes.append(f"if the drift of {self.drifted} is expected, raise the drift "
                         "threshold or set drift 'fail' to false (PipelineSpec.drift)")
        raise DataValidationError(f"{self.summary()}\nTo proceed: {'; '.join(fixes)}.",
                                  self)


def _failure_line(f: Dict[str, Any]) -> str:
    more = ", ..." if f["count"] > len(f["rows"]) else ""
    where = f" (rows {', '.join(map(str, f['rows']))}{more})" if f.get("rows") else ""
    values = f": {', '.join(map(repr, f['examples']))}" if f.get("examples") else ""
    if f["check"].startswith("type "):
        return f"column {f['column']!r}: expected {f['check']}, found {f['examples'][0]}"
    if f["check"].startswith("columns "):
        return f"{f['check']} ({f['count']}): {', '.join(f['examples'])}"
    return f"column {f['column']!r}: {f['check']} — {f['count']} failing{values}{where}"


# --- entry point ------------------------------------------------------------------------
def validate(dataset: Union[DatasetRef, Dict[str, Any]],
             schema: Optional[Mapping[str, Any]] = None,
             checks: Optional[Mapping[str, Any]] = None, *, pipeline: Optional[str] = None,
             storage: Optional[str] = None, output_dir: Optional[str] = None,
             raise_on_failure: bool = True) -> ValidationReport:
    """Check a data set against a schema and for drift; write the report.

    Args:
        dataset: The data set (``ingest``'s output).
        schema: The expected schema in JSON form (module docstring); default the
            pipeline's ``data_schema``; None without a pipeline: no schema checks.
        checks: ``{"min_rows": N, "drift": {"method": "psi"|"ks", "threshold": 0.2,
            "fail": False, "bins": 10, "columns": [...]}, "reference": DatasetRef}``;
            ``drift`` defaults to the pipeline's, ``reference`` to the data set the
            pipeline's ``production`` model was trained on (none yet: no drift check).
        pipeline: A registered pipeline whose schema and drift settings apply.
        storage: Where the pipeline's models live (to find the production model).
        output_dir: Where ``report.md`` and ``report.json`` go; default
            ``<data set>-validation`` beside the data set.
        raise_on_failure: Raise :class:`DataValidationError` when it did not pass
            (after writing the report). False: return the report either way.

    Raises:
        DataValidationError: a hard check failed, or drift beyond the threshold with
            ``"fail": true``.
        ConfigError: a malformed schema or checks.
    """
    ref = DatasetRef.from_dict(dataset)
    checks = dict(checks or {})
    unknown = sorted(set(checks) - _CHECK_KEYS)
    if unknown:
        raise ConfigError(f"validate(checks=...) has unknown keys {unknown}: use "
                          f"{sorted(_CHECK_KEYS)}.")
    spec = _pipeline_spec(pipeline)
    if schema is None and spec is not None:
        schema = getattr(spec, "data_schema", None)
    settings = drift.drift_settings({**(getattr(spec, "drift", None) or {}),
                                      **(checks.get("drift") or {})})
    failures = schema_failures(ref, schema, checks.get("min_rows"))
    reference, warnings = _reference(checks, spec, storage)
    table: List[Dict[str, Any]] = []
    if reference is not None:
        table = drift.drift_table(ref, reference, settings)
        warnings += [_drift_line(row) for row in table if row["drifted"]]
    drift_fails = bool(settings["fail"] and any(r["drifted"] for r in table))
    report = ValidationReport(
        dataset=ref, passed=not failures and not drift_fails, failures=failures, drift=table,
        warnings=warnings, drift_fails=drift_fails,
        reference={} if reference is None else {"uri": reference.uri,
                                                 "fingerprint": reference.fingerprint,
                                                 "method": settings["method"],
                                                 "threshold": settings["threshold"],
                                                 "fail": settings["fail"]})
    report.report_uri = write_report(report, output_dir or f"{ref.uri.rstrip('/')}-validation")
    (logger.info if report.passed else logger.error)("%s", report.summary())
    if raise_on_failure:
        report.raise_for_status()
    return report


def _pipeline_spec(pipeline: Optional[str]) -> Any:
    if pipeline is None:
        return None
    from pipelines import get_pipeline

    return get_pipeline(pipeline)


def _drift_line(row: Dict[str, Any]) -> str:
    new = f"; categories never seen: {row['new_categories']}" \
        if row.get("new_categories") else ""
    return (f"column {row['column']!r} drifted: {row['method']} {row['statistic']:.4g} > "
            f"{row['threshold']}{new}")


def _reference(checks: Dict[str, Any], spec: Any, storage: Optional[str]
               ) -> Tuple[Optional[DatasetRef], List[str]]:
    """The drift reference: ``checks["reference"]``, else the production model's
    training data (with a warning, not an error, where there is none)."""
    given = checks.get("reference")
    if given is not None:
        return DatasetRef.from_dict(given), []
    if spec is None:
        return None, []
    from tasks.registry.aliases import resolve_alias

    try:
        production = resolve_alias(spec.name, "production", storage=storage)
    except Exception as exc:  # no registry yet, unreadable pointer: drift is advisory
        return None, [f"no drift check: the production model could not be read ({exc})"]
    if production is None:
        return None, ["no drift check: no production model yet"]
    data_uri = getattr(production, "data_uri", None)
    found = None
    if data_uri:
        st = Storage.from_path(data_uri)
        found = files.load_manifest(st, st.root)
    if found is None:
        return None, [f"no drift check: the training data of the production model "
                      f"({production.uri}) is not recorded or no longer exists"]
    return found, []


# --- schema -----------------------------------------------------------------------------
def schema_failures(ref: DatasetRef, schema: Optional[Mapping[str, Any]],
                    min_rows: Optional[int] = None) -> List[Dict[str, Any]]:
    """The failing hard checks of ``ref``: structure and types from its Arrow schema,
    values (nulls, ranges, categories) with pandera, batch by batch."""
    failures: List[Dict[str, Any]] = []
    if min_rows is not None and ref.num_rows < int(min_rows):
        failures.append({"column": "*", "check": f"at least {min_rows} rows", "count": 1,
                         "examples": [ref.num_rows], "rows": []})
    if schema is None:
        return failures
    columns, strict = _parse_schema(schema)
    missing = [n for n, r in columns.items() if n not in ref.schema and r.get("required", True)]
    extra = [n for n in ref.schema if n not in columns] if strict else []
    for names, check in ((missing, "columns missing"), (extra, "columns not in the schema "
                                                         "(it is strict)")):
        if names:
            failures.append({"column": ", ".join(names[:_MAX_EXAMPLES])
                             + (", ..." if len(names) > _MAX_EXAMPLES else ""),
                             "check": check, "count": len(names), "examples": names[:20],
                             "rows": []})
    wrong = [n for n, r in columns.items() if n in ref.schema and "type" in r
             and not type_matches(ref.schema[n], str(r["type"]))]
    failures += [{"column": n, "check": f"type {columns[n]['type']}", "count": 1,
                  "examples": [ref.schema[n]], "rows": []} for n in wrong]
    checked = {n: r for n, r in columns.items() if n in ref.schema and n not in wrong}
    return failures + _value_failures(ref, checked)


def _parse_schema(schema: Mapping[str, Any]) -> Tuple[Dict[str, Dict[str, Any]], bool]:
    if not isinstance(schema, Mapping) or not isinstance(schema.get("columns"), Mapping):
        raise ConfigError("A schema is {'columns': {name: {'type': ..., 'nullable': ..., "
                          "'min': ..., 'max': ..., 'isin': [...]}}, 'strict': False}.")
    extra = sorted(set(schema) - {"columns", "strict"})
    if extra:
        raise ConfigError(f"schema has unknown keys {extra}: use 'columns' and 'strict'.")
    columns = {}
    for name, rule in schema["columns"].items():
        rule = dict(rule or {})
        unknown = sorted(set(rule) - _COLUMN_KEYS)
        if unknown:
            raise ConfigError(f"schema column {name!r} has unknown keys {unknown}: use "
                              f"{sorted(_COLUMN_KEYS)}.")
        columns[str(name)] = rule
    return columns, bool(schema.get("strict", False))


def type_matches(actual: str, expected: str) -> bool:
    """Whether an Arrow type name (``DatasetRef.schema``) is of the expected type: an
    Arrow/pandas name (``int64``, ``float64``, ``string``) or a kind (``int``, ``float``,
    ``number``, ``string``, ``bool``, ``date``, ``timestamp``)."""
    actual = _ALIASES.get(actual, actual)
    kinds = {"int": ("int", "uint"), "integer": ("int", "uint"),
             "float": ("float", "double", "halffloat"),
             "number": ("int", "uint", "float", "double", "halffloat", "decimal"),
             "string": ("string",), "bool": ("bool",), "date": ("date",),
             "timestamp": ("timestamp",), "datetime": ("timestamp",),
             "category": ("string", "dictionary")}
    if expected in kinds:
        return actual.startswith(kinds[expected])
    return actual == _ALIASES.get(expected, expected)


def _value_failures(ref: DatasetRef, columns: Dict[str, Dict[str, Any]]
                    ) -> List[Dict[str, Any]]:
    """Nulls, ranges and categories, checked by pandera on each batch (lazily, so every
    failure of a batch is collected), merged per column and check."""
    schema = _pandera_schema(columns)
    if schema is None or ref.num_rows == 0:
        return []
    pdr = _pandera()
    merged: Dict[Tuple[str, str], Dict[str, Any]] = {}
    offset = 0
    for batch in files.scan(ref, list(schema.columns)):
        frame = batch.to_pandas()
        try:
            schema.validate(frame, lazy=True)
        except pdr.errors.SchemaErrors as exc:
            _merge(merged, exc.failure_cases, frame, offset)
        offset += batch.num_rows
    return list(merged.values())


def _pandera() -> Any:
    """``pandera.pandas``, imported without its side effect on the environment: the
    import sets SPARK_LOCAL_IP and PYARROW_IGNORE_TIMEZONE for pyspark, which every
    process started from here (Ray workers, subprocesses) would then inherit."""
    names = ("SPARK_LOCAL_IP", "PYARROW_IGNORE_TIMEZONE")
    saved = {k: os.environ.get(k) for k in names}
    try:
        import pandera.pandas as pdr
    except ImportError as exc:
        raise ImportError("validate needs pandera: pip install 'trainyard[validate]'.") \
            from exc
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return pdr


def _pandera_schema(columns: Dict[str, Dict[str, Any]]) -> Any:
    pdr = _pandera()

    out = {}
    for name, rule in columns.items():
        checks = []
        if rule.get("min") is not None:
            checks.append(pdr.Check.ge(rule["min"], error=f"min {rule['min']}"))
        if rule.get("max") is not None:
            checks.append(pdr.Check.le(rule["max"], error=f"max {rule['max']}"))
        if rule.get("isin") is not None:
            allowed = list(rule["isin"])
            checks.append(pdr.Check.isin(allowed, error=f"allowed values {_short(allowed)}"))
        nullable = bool(rule.get("nullable", True))
        if checks or not nullable:
            out[name] = pdr.Column(nullable=nullable, checks=checks, required=False)
    return pdr.DataFrameSchema(out) if out else None


def _short(values: List[Any]) -> str:
    if len(values) <= 12:
        return repr(values)
    return f"[{', '.join(map(repr, values[:10]))}, ... ({len(values)} values)]"


def _merge(merged: Dict[Tuple[str, str], Dict[str, Any]], cases: Any, frame: Any,
           offset: int) -> None:
    """Add pandera's failure cases of one batch (row positions within ``frame``)."""
    for row in cases.itertuples(index=False):
        check = "not nullable" if str(row.check) == "not_nullable" else str(row.check)
        key = (str(row.column), check)
        entry = merged.setdefault(key, {"column": key[0], "check": check, "count": 0,
                                        "examples": [], "rows": []})
        entry["count"] += 1
        position = row.index if row.index is not None and row.index == row.index else None
        # The value as stored (pandera's failure_case column may upcast ints to floats).
        value = _json_value(frame[key[0]].iloc[int(position)] if position is not None
                            else row.failure_case)
        if len(entry["examples"]) < _MAX_EXAMPLES and value not in entry["examples"]:
            entry["examples"].append(value)
        if len(entry["rows"]) < _MAX_EXAMPLES and position is not None:
            entry["rows"].append(int(position) + offset)


def _json_value(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


# --- report -----------------------------------------------------------------------------
def write_report(report: ValidationReport, directory: str) -> str:
    """Write ``report.md`` and ``report.json`` under ``directory``; return its URI."""
    st = Storage.from_path(directory)
    st.write_bytes_atomic(join(st.root, REPORT_MD), markdown(report).encode("utf-8"))
    shown = redact(directory)
    st.write_json_atomic(join(st.root, REPORT_JSON), {**report.to_dict(), "report_uri": shown})
    return shown


def markdown(report: ValidationReport) -> str:
    """The report as Markdown: outcome, hard checks, drift table."""
    d = report.dataset
    lines = [f"# Validation of `{d.name or 'data'}`", "",
             f"**{'PASSED' if report.passed else 'FAILED'}** — {d.num_rows} rows, "
             f"{len(d.schema)} columns, fingerprint `{d.fingerprint[:16]}`, `{d.uri}`", ""]
    lines += ["## Hard checks", ""]
    if report.failures:
        lines += ["| column | check | failing | examples | rows |", "|---|---|---|---|---|"]
        lines += [f"| `{f['column']}` | {f['check']} | {f['count']} | "
                  f"{', '.join(map(repr, f['examples']))} | "
                  f"{', '.join(map(str, f['rows']))} |" for f in report.failures]
    else:
        lines.append("All passed.")
    lines += ["", "## Drift", ""]
    if report.reference:
        r = report.reference
        lines.append(f"Against `{r['uri']}` (fingerprint `{r['fingerprint'][:16]}`), "
                     f"{r['method']} threshold {r['threshold']}, "
                     f"{'fails' if r['fail'] else 'warns'} when exceeded.")
        lines += ["", "| column | method | statistic | drifted | new categories |",
                  "|---|---|---|---|---|"]
        lines += [f"| `{row['column']}` | {row['method']} | {row['statistic']:.4g} | "
                  f"{'**yes**' if row['drifted'] else 'no'} | "
                  f"{', '.join(row.get('new_categories', []))} |" for row in report.drift]
    else:
        lines.append("Not checked (no reference data set).")
    if report.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


__all__ = ["validate", "ValidationReport", "DataValidationError", "schema_failures",
           "type_matches", "write_report", "markdown"]
