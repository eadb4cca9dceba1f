"""The shop's Django settings. Services come from the environment (SHOP_*), with local defaults."""

import os
from pathlib import Path
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "django-insecure-example-only")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "shop",
    "saga_worker.contrib.django",  # SAGA_* from these settings, the journal in DATABASES["default"]
]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "proj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = urlsplit(os.environ.get("SHOP_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shop"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": _db.username or "",
        "PASSWORD": _db.password or "",
        "HOST": _db.hostname or "",
        "PORT": str(_db.port or ""),
    }
}

# Celery ("First steps with Django": the CELERY_ namespace).
CELERY_BROKER_URL = os.environ.get("SHOP_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SHOP_QUEUE", "shop")
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"

# saga-worker: the tools whose hooks undo the shop's steps (no default: a worker without them refuses
# to start). The journal is DATABASES["default"] (its own saga_* tables, made by `manage.py migrate`);
# the broker and results are Celery's above.
SAGA_TOOLS = "shop.tools:TOOLS"
SAGA_QUEUE = os.environ.get("SHOP_SAGA_QUEUE", "saga")
SAGA_REDIS_URL = CELERY_BROKER_URL  # step locks

# `manage.py test`: the journal follows Django to the test database; this runner closes its
# connections before the test database is dropped.
TEST_RUNNER = "saga_worker.contrib.django.test.SagaDiscoverRunner"
