"""Celery's time limits for a step whose tool has a compensation timeout (docs/reference/celery.md).

The hook's timeout is the library's own (``compensation.hookcall``), the same in-process and on
workers. Celery's limits bound the step task around it: ``soft_time_limit`` is the step's whole
budget (every attempt, every backoff, the journal work and a dead twin's lease), and the hard
``time_limit`` a little more. A step whose hook timed out hands its report on, then, its outcome
stored (the task's ``after_return``), waits for the hook to end: in a prefork child the hard limit
kills the child if it never does, and with it the hook, which can then no longer land; the claim's
lease lapses and the sweeper re-drives the step with the same key. A result stored before that kill
stays (celery/timeouts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..compensation import hookcall
from ..compensation.chain import Step
from ..journal.roles import UnwindJournal
from ..recording.tools import Tool

# Around the hook calls: a dead twin's lease waited out (up to ~1.7 claim TTLs), the record, claim and
# entry reads and writes. Generous: a soft limit that fires early would end a healthy step.
MARGIN_TTLS = 2.0
MARGIN_S = 10.0


def step_budget(tool: Tool, claim_ttl: float) -> float | None:
    """Seconds the step of ``tool`` may take in all; None when the tool has no compensation timeout."""
    timeout = tool.compensate_timeout
    if timeout is None or tool.compensate is None:
        return None
    policy = tool.compensate_retry
    waits = sum(policy.delay(n) for n in range(1, policy.attempts))
    return policy.attempts * timeout + waits + MARGIN_TTLS * claim_ttl + MARGIN_S


def time_limits(
    journal: UnwindJournal, tools: Mapping[str, Tool] | None, step: Step, claim_ttl: float
) -> tuple[float, float] | None:
    """``(soft_time_limit, time_limit)`` for the message of ``step``; None (no limits, as ever) unless
    its tool has a compensation timeout. Reads the step's record only when some tool has one."""
    if not tools or not any(t.compensate_timeout is not None for t in tools.values()):
        return None
    record = journal.get_record(step.run_id, step.suffix)
    tool = None if record is None else tools.get(record.tool_name)
    budget = None if tool is None else step_budget(tool, claim_ttl)
    if budget is None:
        return None
    return budget, budget + max(MARGIN_S / 2, claim_ttl)


def hold_for_timed_out_hooks(request: Any) -> None:
    """In a prefork pool child whose step message carries a hard time limit: wait for the hooks that
    timed out in this process to end (their outcomes are written as they do), so that the pool's hard
    limit, not the hook, decides when they stop. Elsewhere (eager, solo or threads pools, no limit)
    nothing waits: a hook that outlives its timeout keeps its claim until it ends or its process exits."""
    if not hookcall.abandoned() or not _in_prefork_child():
        return
    limits = getattr(request, "timelimit", None) or (None, None)
    if not limits[0]:
        return
    hookcall.wait_for_abandoned()


def _in_prefork_child() -> bool:
    # Celery's prefork pool names its children ForkPoolWorker-N; the solo and threads pools run tasks
    # in the worker's main process, where nothing enforces a hard time limit.
    from billiard.process import current_process

    return str(current_process().name).startswith("ForkPoolWorker")
