"""The Celery app, as Celery's "First steps with Django" lays it out, with saga-worker installed."""

import os

from celery import Celery

from saga_worker.celery import install

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install(app)
