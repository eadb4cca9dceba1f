"""A saga task whose message keeps coming back because the worker process running it is lost.

Saga tasks are acknowledged late and handed back when their pool child dies
(``task_reject_on_worker_lost``), so a step interrupted by a crash is re-driven with the same key. A
message whose task kills every process that runs it (a hook that exits or segfaults, the OOM killer
on an input too large) would then come back forever, taking a pool child down each time. So each
redelivery is counted in the journal, durably, before the task runs anything of its own, keyed by
task id (a Celery retry keeps the id and is a new message, not a redelivery). Past
``SAGA_MAX_DELIVERIES`` deliveries the task is answered instead of run: a step reads ``failed``,
none of its tool's code called this time, with what its claim tells of the earlier deliveries (its
hook's starts, an outcome never recorded), and its run is flagged for a person; any other saga task
ends with :class:`DeliveriesExhausted`. Either way the message is acknowledged.

The broker says which deliveries are redeliveries: kombu's Redis transport marks the messages it
hands back, RabbitMQ marks them itself. A first delivery writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..journal.roles import UnwindJournal

log = logging.getLogger(__name__)


class DeliveriesExhausted(Exception):
    """A saga task not run again: the worker process running it was lost on each of its deliveries,
    up to ``SAGA_MAX_DELIVERIES``."""


@dataclass(frozen=True)
class Delivery:
    """This delivery of a task's message: ``number`` 1 for the first."""

    task_id: str
    number: int
    limit: int

    @property
    def refusal(self) -> str | None:
        """Why the task must not run again, or None while it may."""
        if self.number <= self.limit:
            return None
        lost = self.number - 1
        return (
            f"not run again: the worker process running task {self.task_id!r} was lost {lost} times "
            f"(killed, crashed or restarted before the task ended; SAGA_MAX_DELIVERIES={self.limit}); "
            "find what kills it, then re-drive the run"
        )


def redelivered(request: Any) -> bool:
    """Did the broker hand this message back before (a delivery whose task never ended)?"""
    if getattr(request, "is_eager", False):
        return False
    info = getattr(request, "delivery_info", None) or {}
    return bool(info.get("redelivered"))


@contextmanager
def counted(request: Any, journal: UnwindJournal, limit: int) -> Iterator[Delivery]:
    """This delivery of ``request``'s task, counted (durably, before the body runs) when it is a
    redelivery; the count goes when the task ends in any way its process survives."""
    task_id = str(getattr(request, "id", "") or "")
    if not task_id or not redelivered(request):
        yield Delivery(task_id, 1, limit)
        return
    delivery = Delivery(task_id, journal.count_redelivery(task_id) + 1, limit)
    log.warning(
        "task %s delivered again after its worker process was lost (delivery %d of at most %d)",
        task_id,
        delivery.number,
        limit,
    )
    try:
        yield delivery
    finally:
        try:
            journal.forget_redeliveries(task_id)
        except Exception:  # the row only makes a later redelivery of this id count from there
            log.warning("could not clear the redelivery count of task %s", task_id, exc_info=True)


__all__ = ["DeliveriesExhausted", "Delivery", "counted", "redelivered"]
