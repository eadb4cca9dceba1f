"""Compensation: the engine, its report, and the questions and refusals about condemned runs."""

from .engine import compensate_run
from .report import CompensationEntry, CompensationReport, CompensationStatus
from .tombstone import assert_not_compensated, run_compensated

__all__ = [
    "CompensationEntry",
    "CompensationReport",
    "CompensationStatus",
    "assert_not_compensated",
    "compensate_run",
    "run_compensated",
]
