"""Checking a data set before training: its schema (``schema``: types, nulls, ranges,
allowed values, with pandera) and its drift from a reference (``drift``: PSI, KS).

    from tasks.validation import validate, ValidationReport, DataValidationError
"""

from tasks.validation.schema import (REPORT_JSON, REPORT_MD, DataValidationError,
                                     ValidationReport, markdown, schema_failures,
                                     type_matches, validate, write_report)

__all__ = ["validate", "ValidationReport", "DataValidationError", "schema_failures",
           "type_matches", "write_report", "markdown", "REPORT_MD", "REPORT_JSON"]
