"""saga-worker's worker app as it runs on a Celery release its speed patch was not checked against (``saga_worker/celery/checked_releases.py``): ``celery -A
tests.integration.unchecked_release_app:app worker``."""

from __future__ import annotations

from packaging.version import Version

from saga_worker.celery import checked_releases

checked_releases.installed_version = lambda distribution: Version("99.0")

from saga_worker.celery import app  # noqa: E402  (after the release it reads is set)

__all__ = ["app"]
