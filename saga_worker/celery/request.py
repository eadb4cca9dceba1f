"""The worker-side half of "JSON only" for the saga tasks on an app that accepts more.

``accept_content`` is a worker-wide setting, and an app the tasks are installed on may accept
pickle for its own tasks. The saga tasks trust nothing in a message but ids, and refuse any message
that is not JSON: this Request class (set per task) rejects such a message before it runs, without
requeueing it, and stores the refusal as the task's result so a caller waiting on it learns why.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import Any

from celery.exceptions import InvalidTaskError
from celery.worker.request import Request

log = logging.getLogger(__name__)
JSON = "application/json"


class JsonOnlyRequest(Request):  # type: ignore[misc]
    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        content_type = getattr(message, "content_type", None)
        if content_type is not None and content_type != JSON:
            error = InvalidTaskError(
                f"{self.name} [{self.id}]: saga tasks accept JSON messages only, this one is {content_type}"
            )
            with suppress(Exception):  # best effort: the refusal itself is what matters
                self.task.backend.mark_as_failure(self.id, error, request=None)
            log.error("%s", error)
            raise error


__all__ = ["JSON", "JsonOnlyRequest"]
