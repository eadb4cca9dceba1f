"""``TEST_RUNNER = "saga_worker.contrib.django.test.SagaDiscoverRunner"``: Django's runner, which
closes the journal's connections before it destroys the test databases (an open connection would
block ``DROP DATABASE``). With pytest-django, call ``close_journals()`` in a session fixture's
teardown instead."""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner

from . import close_journals


class SagaDiscoverRunner(DiscoverRunner):  # type: ignore[misc]
    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_journals()
        super().teardown_databases(old_config, **kwargs)


__all__ = ["SagaDiscoverRunner"]
