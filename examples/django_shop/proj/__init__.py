# This makes sure the Celery app is always imported when Django starts, so that @shared_task uses
# it (Celery's "First steps with Django").
from .celery import app as celery_app

__all__ = ("celery_app",)
