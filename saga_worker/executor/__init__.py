"""The library side of the distributed executor (docs/reference/celery.md): everything the Celery tasks do,
reachable by a unit test without a broker.

An unwind over Celery is a chain of continuations: the coordinator writes the tombstone and records
the worklist (``start_unwind``), each step task applies the engine's rules to one step and stores
its entry (``run_step``), and the last task assembles the report from the journal
(``finalize_unwind``). The beat sweeper (``sweep``) re-drives unwinds that were interrupted.
"""

from __future__ import annotations

from ..compensation.chain import (
    Fan,
    Finalize,
    Next,
    Step,
    Wait,
    finalize_unwind,
    run_rest,
    run_step,
    start_unwind,
    step_owner,
)
from ..compensation.sweeper import SweepOutcome, UnwindsAndTrail, backoff_delay, sweep, unfinished_unwinds
from .context import (
    ToolsSource,
    WorkerContext,
    check_tools_at_start,
    configure,
    configured_settings,
    current,
    load_tools,
    log_tools,
    prepare_journal,
    reset,
    tools_source,
)
from .limits import hold_for_timed_out_hooks, step_budget, time_limits

__all__ = [
    "Fan",
    "Finalize",
    "Next",
    "Step",
    "SweepOutcome",
    "ToolsSource",
    "UnwindsAndTrail",
    "Wait",
    "WorkerContext",
    "backoff_delay",
    "check_tools_at_start",
    "configure",
    "configured_settings",
    "current",
    "finalize_unwind",
    "hold_for_timed_out_hooks",
    "load_tools",
    "log_tools",
    "prepare_journal",
    "reset",
    "run_rest",
    "run_step",
    "start_unwind",
    "step_budget",
    "step_owner",
    "sweep",
    "time_limits",
    "tools_source",
    "unfinished_unwinds",
]
