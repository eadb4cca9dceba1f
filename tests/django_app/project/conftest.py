"""pytest-django: close the journal's connections before the test database is dropped (an open
connection would block DROP DATABASE), as SagaDiscoverRunner does under `manage.py test`."""

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _close_saga_journals(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    yield
    from saga_worker.contrib.django import close_journals

    close_journals()
