"""What the memory journal's parts share: its lock, and values copied in and out as JSON."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ...keys import canonical_json


def copy_json(value: Any) -> Any:
    """Values go in and out as JSON, as they do in SQL, so callers can never alias journal state."""
    return None if value is None else json.loads(canonical_json(value))


class MemoryState:
    """The lock every part of ``MemoryJournal`` takes (reentrant: one part's write may call another's)."""

    _lock: threading.RLock

    def now(self) -> float:
        return time.time()
