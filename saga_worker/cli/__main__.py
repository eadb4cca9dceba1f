"""``python -m saga_worker.cli``: the same as the ``saga-worker`` console script."""

from . import main

main()
