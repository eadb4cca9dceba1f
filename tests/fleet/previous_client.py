"""The previous release's client for the rolling upgrade (tests/fleet/rolling.py): run as a file by
that release's interpreter, with that release's ``tests`` tree on PYTHONPATH, so the runs it starts
are executed, and their condemn requests sent, by the previous release's code (its rows, its
``compensate_run`` messages). Reads ``RUN_ID COMP_SLEEP`` lines on stdin: executes the run's steps,
sends ``saga.compensate_run`` through the broker and answers ``RUN_ID TASK_ID`` (or ``RUN_ID -`` when
the broker was out of reach), one line each. ``send RUN_ID`` lines send again only.

Its journal is opened once, at start, as a coordinator that was running before the expand migration.
"""

from __future__ import annotations

import contextlib
import os
import sys

from saga_worker import open_journal
from saga_worker.celery import make_app
from saga_worker.settings import get_settings
from tests.faults.harness import start_run

STEPS = int(os.environ.get("FLEET_STEPS", "4"))


def main() -> None:
    settings = get_settings()
    journal = open_journal(settings.resolved_journal_url())
    app = make_app(settings, main="fleet-previous-client")
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "send":
            run_id = words[1]
        else:
            run_id, comp_sleep = words[0], float(words[1])
            with contextlib.suppress(Exception):  # the journal may be restarting: condemn what is there
                start_run(journal, run_id, STEPS, comp_sleep=comp_sleep)
        task_id = "-"
        with contextlib.suppress(Exception):
            task_id = str(app.send_task("saga.compensate_run", args=[run_id]).id)
        print(f"{run_id} {task_id}", flush=True)
    journal.close()
    sys.stdout.flush()
    os._exit(0)  # the Celery client's pending results would unsubscribe from a Redis maybe gone


if __name__ == "__main__":
    main()
