"""A documented import path (``saga_worker.transactions.watch_sqlalchemy``): the code lives in
``recording/transactions.py``; this module only re-exports it."""

from .recording.transactions import *  # noqa: F403
from .recording.transactions import __all__ as __all__
