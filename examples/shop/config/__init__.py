"""The shop's own settings package, named ``config`` as in cookiecutter-django projects: saga-worker's
wheel installs no package of that name, so the two never collide. ``celery -A config worker`` finds
the shop's Celery app here."""

from .celery import app

__all__ = ["app"]
