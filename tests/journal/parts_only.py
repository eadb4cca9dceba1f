"""A journal of the parts alone (docs: DEVELOPING.md, "Adding a journal backend"): the memory journal
with every method that spans parts taken back to ``Journal``'s default. The ``memory-parts`` backend
of the ``journal`` fixture, so the contract tests run on it as on every backend."""

from __future__ import annotations

from saga_worker.journal.base import Journal
from saga_worker.journal.memory import MemoryJournal

SPANNING = ("finish_step", "record_unwind", "hold_sweep", "read_worklist", "read_step", "list_runs")


class PartsOnly(MemoryJournal):
    """The memory journal's parts, and nothing of its own for what spans them."""


for _name in SPANNING:
    setattr(PartsOnly, _name, getattr(Journal, _name))
