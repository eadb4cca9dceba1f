"""The Celery app, as Celery's "First steps with Django" lays it out, with saga-worker installed."""

import os

from celery import Celery

from saga_worker.celery import install

# Set the default Django settings module for the 'celery' program.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")

# All Celery settings are in Django's settings with a CELERY_ prefix; saga-worker's with SAGA_.
app.config_from_object("django.conf:settings", namespace="CELERY")

# Load task modules from all registered Django apps.
app.autodiscover_tasks()

# The saga.* tasks (unwind, step, sweeper) on this app. Their settings (SAGA_TOOLS, SAGA_QUEUE, ...)
# come from Django's settings; the tools module imports the shop's models, so it is loaded on first
# use, after django.setup(). Run workers with `-Q <CELERY_TASK_DEFAULT_QUEUE>,<SAGA_QUEUE>`.
install(app)
