"""A project as `django-admin startproject proj` lays it out, with saga-worker's app installed. Its
database (and so the journal) is the URL in PROJ_DATABASE_URL: SQLite or PostgreSQL."""

import hashlib
import os
import tempfile
from urllib.parse import urlsplit

SECRET_KEY = "django-insecure-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "orders",
    "saga_worker.contrib.django",  # SAGA_* from these settings, the journal in DATABASES["default"], the admin
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
ROOT_URLCONF = "proj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = urlsplit(os.environ["PROJ_DATABASE_URL"])
if _db.scheme == "sqlite":
    # `manage.py test`'s database a file too (Django's default is in memory, which the journal's own
    # connections cannot see).
    _name = _db.path[1:]
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _name, "TEST": {"NAME": _name + ".test"}}
    }
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

# A second database, which the journal does not live in: a call inside its atomic() is refused.
_other = os.path.join(
    tempfile.gettempdir(),
    "proj-other-" + hashlib.sha256(os.environ["PROJ_DATABASE_URL"].encode()).hexdigest()[:16],
)
DATABASES["other"] = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": _other,
    "TEST": {"NAME": _other + ".test"},
}

CELERY_BROKER_URL = os.environ.get("PROJ_BROKER_URL", "memory://")
CELERY_RESULT_BACKEND = "cache+memory://"
SAGA_TOOLS = "orders.tools:TOOLS"
TEST_RUNNER = "saga_worker.contrib.django.test.SagaDiscoverRunner"
