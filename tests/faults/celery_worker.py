"""A Celery worker for the fault suite: ``python -m tests.faults.celery_worker [celery worker args]``.

The same worker as ``celery -A saga_worker.celery:app worker``, except that it enables fault points (armed from
``SAGA_FAULTS`` / ``SAGA_FAULTS_DIR``; a plain worker never reads them) and ``FAULT_BREAK`` (comma-separated names
from tests/faults/breaks.py) breaks the product first, in the main process, so its pool children inherit both.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    from saga_worker.celery import default_app
    from saga_worker.core import faults
    from tests.faults import breaks

    faults.enable()
    for name in filter(None, os.environ.get("FAULT_BREAK", "").split(",")):
        breaks.apply(name)
    default_app().worker_main(["worker", *sys.argv[1:]])


if __name__ == "__main__":
    main()
