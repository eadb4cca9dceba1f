"""Forward steps as an app's own Celery tasks (docs/reference/integration.md).

A forward task records its side effect into a run with :func:`record_call`: the call is journaled
and settled exactly as ``run.call`` in a ``saga()`` block (claimed before execute, replayed on a
redelivery, ``recover``/``idempotent`` for one interrupted by a lost worker, refused once the run is
condemned). A chain of such tasks across any number of workers builds one run whose execution order
is the journal's, and ``compensate_run.delay(run_id)`` unwinds it. Calls carry explicit ids: each
task is a block of its own, so positions would restart at 1 in every task.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from .. import executor
from ..core.checks import check_group
from ..journal.roles import RunJournal
from ..recording.blocks import saga
from ..recording.groups import recorded_as_group
from ..recording.tools import Tool


def record_call(
    run_id: str,
    tool_name: str,
    input: Any,  # noqa: A002
    *,
    id: str,  # noqa: A002
    finish: bool = False,
    prompt: str = "",
    journal: RunJournal | None = None,
    tools: Mapping[str, Tool] | None = None,
    group: str | None = None,
) -> Any:
    """Call ``tool_name`` once as call ``id`` of run ``run_id`` and return its output.

    The journal and tools default to this worker's (``SAGA_JOURNAL_URL`` and ``SAGA_TOOLS``, or what
    ``install(app, settings=..., tools=...)`` was given). ``finish=True`` (the chain's last step)
    finishes the run after the call. A tool that raises marks the run failed and raises
    ``ToolFailedError``, which stops the chain; unwinding is then the app's call.

    ``group`` records the call in that group of the run (docs/reference/compensation.md, "Groups"):
    pass ``self.request.group`` from the tasks of one Celery ``group`` whose calls are independent,
    and ``compensate_run(..., parallel=True)`` undoes them side by side. It is never guessed from the
    task's request: a chain inside a group shares that id, and its calls depend on each other."""
    ctx = executor.current() if journal is None or tools is None else None
    scope = contextlib.nullcontext() if group is None else recorded_as_group(run_id, check_group(group))
    with (
        scope,
        saga(
            run_id,
            journal=journal if journal is not None else ctx.journal,  # type: ignore[union-attr]
            tools=tools if tools is not None else ctx.require_tools("record_call"),  # type: ignore[union-attr]
            prompt=prompt,
            finish=finish,
        ) as run,
    ):
        return run.call(tool_name, input, id=id)


__all__ = ["record_call"]
