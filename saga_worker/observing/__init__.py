"""Telemetry that never breaks the work it watches: the guard (``failed``, ``quietly``,
``harmless``), traces, metrics and JSON log lines."""

from .guard import failed, harmless, quietly

__all__ = ["failed", "harmless", "quietly"]
