"""Compensation: the engine, its report, and the guards on condemned runs."""

from .engine import compensate_run
from .guards import assert_not_compensated, run_compensated
from .report import CompensationEntry, CompensationReport, CompensationStatus

__all__ = [
    "CompensationEntry",
    "CompensationReport",
    "CompensationStatus",
    "assert_not_compensated",
    "compensate_run",
    "run_compensated",
]
