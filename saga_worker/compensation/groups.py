"""Groups of concurrent calls, and the parallel unwind (docs/reference/compensation.md, "Groups").

A group is what the run recorded as concurrent (``ToolRecord.group``); a call outside any is a group
of one. The report numbers groups by their position in execution order (the first call of each), and
every entry carries its number, whichever way the run is unwound.

With ``parallel=True`` the groups go in reverse order, as steps do in the sequential unwind, and the
steps of one group are attempted side by side: each is a ``StepAttempt`` exactly as in the
sequential unwind (its own claim, key, lease and verdict), on a thread of a pool bounded by
``SAGA_PARALLEL_MAX`` (an ``async def`` hook runs on its own event loop there, as ``call_hook`` drives
it). Every step of a group is attempted, whatever its neighbours end in; a step that halts (failed,
busy, awaiting approval) makes every earlier group ``not-attempted``. Entries are listed groups in
reverse, each group's steps in reverse recording order, whatever order they finished in.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from ..journal.records import ToolRecord
from .report import CompensationEntry, halts


def grouped(records: Sequence[ToolRecord]) -> list[list[ToolRecord]]:
    """``records`` (in execution order) as groups in execution order: a group's place is its first
    call's, its calls in recording order; a record without a group is a group of its own."""
    groups: list[list[ToolRecord]] = []
    at: dict[str, int] = {}
    for record in records:
        if record.group is None:
            groups.append([record])
            continue
        place = at.get(record.group)
        if place is None:
            at[record.group] = len(groups)
            groups.append([record])
        else:
            groups[place].append(record)
    return groups


def group_numbers(records: Sequence[ToolRecord]) -> dict[tuple[str, str], int]:
    """Each record's group number, keyed ``(origin_run_id, suffix)``: 1 for the first group executed."""
    return {
        (r.origin_run_id, r.suffix): number
        for number, members in enumerate(grouped(records), start=1)
        for r in members
    }


def numbered(entries: Sequence[CompensationEntry], records: Sequence[ToolRecord]) -> list[CompensationEntry]:
    """``entries`` with the group of their step (``records``: the unwind's worklist, in execution
    order); an entry of a step not among them keeps the number it has."""
    numbers = group_numbers(records)
    out = []
    for entry in entries:
        number = numbers.get((entry.origin_run_id, entry.suffix))
        out.append(
            entry if number is None or number == entry.group else entry.model_copy(update={"group": number})
        )
    return out


def unwind_order(records: Sequence[ToolRecord]) -> list[list[ToolRecord]]:
    """The groups of ``records`` (in execution order) as a parallel unwind takes them: the last
    group first, each group's steps latest first."""
    return [list(reversed(members)) for members in reversed(grouped(records))]


def undo_in_groups(
    records: Sequence[ToolRecord],
    attempt: Callable[[ToolRecord], CompensationEntry],
    not_attempted: Callable[[ToolRecord], CompensationEntry],
    *,
    at_once: int,
) -> list[CompensationEntry]:
    """Each group of ``records`` (in execution order), last first: every step of a group
    ``attempt``-ed, at most ``at_once`` at a time (waves); after a group with a step that halts, every
    earlier group ``not_attempted`` (nothing probed). An exception from an attempt is raised once the
    rest of its wave has ended, so no step is left running behind the caller's back."""
    entries: list[CompensationEntry] = []
    stopped = False
    with ThreadPoolExecutor(max_workers=max(1, at_once), thread_name_prefix="saga-unwind") as pool:
        for members in unwind_order(records):
            if stopped:
                entries.extend(not_attempted(r) for r in members)
                continue
            results: list[CompensationEntry] = []
            for start in range(0, len(members), max(1, at_once)):
                results.extend(_wave(pool, members[start : start + max(1, at_once)], attempt))
            entries.extend(results)
            stopped = any(halts(e.status) for e in results)
    return entries


def _wave(
    pool: ThreadPoolExecutor,
    wave: Sequence[ToolRecord],
    attempt: Callable[[ToolRecord], CompensationEntry],
) -> list[CompensationEntry]:
    if len(wave) == 1:  # a group of one runs here, as in the sequential unwind
        return [attempt(wave[0])]
    # Each step sees the caller's context (its tracing span, the app's context variables).
    futures: list[Future[CompensationEntry]] = [
        pool.submit(contextvars.copy_context().run, attempt, record) for record in wave
    ]
    errors = [f.exception() for f in futures]  # waits for every step of the wave
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]
