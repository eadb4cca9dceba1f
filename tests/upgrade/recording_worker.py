"""``python -m tests.upgrade.recording_worker [celery worker args]``: the current code's Celery worker
(as ``celery -A saga_worker.celery:app worker``), writing the name of every task it publishes (the
steps of an unwind, retries, beat's sweeps) to ``PUBLISHED_LOG``, one a line. Connected in the main
process, before the pool forks, so its children and its beat write there too."""

from __future__ import annotations

import os
import sys
from typing import Any

from celery.signals import before_task_publish


def main() -> None:
    path = os.environ["PUBLISHED_LOG"]

    @before_task_publish.connect(weak=False)
    def note(sender: str | None = None, **_: Any) -> None:
        with open(path, "a") as f:
            f.write(f"{sender}\n")

    from saga_worker.celery import default_app

    default_app().worker_main(["worker", *sys.argv[1:]])


if __name__ == "__main__":
    main()
