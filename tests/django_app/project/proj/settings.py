"""A project as `django-admin startproject proj` lays it out, with saga-worker's app installed. Its
database (and so the journal) is the URL in PROJ_DATABASE_URL: SQLite or PostgreSQL."""

import os
from urllib.parse import urlsplit

SECRET_KEY = "django-insecure-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "saga_worker.contrib.django",
]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "proj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = urlsplit(os.environ["PROJ_DATABASE_URL"])
if _db.scheme == "sqlite":
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _db.path[1:]}}
else:
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

SAGA_TOOLS = "saga_worker.demo:TOOLS"
TEST_RUNNER = "saga_worker.contrib.django.test.SagaDiscoverRunner"
