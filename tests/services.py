"""Where the real services live, and the rule for when one is down: skip locally with the reason,
fail under CI=true (a green CI must never hide a suite that did not run)."""

from __future__ import annotations

import os
import socket

import pytest

REDIS_URL = os.environ.get("SAGA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN_URL = os.environ.get("SAGA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
AMQP_URL = os.environ.get("SAGA_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

# How long a pip install into a fresh venv may take (a wheel and its dependencies, from the index).
PIP_TIMEOUT = 480

PORTS = {"redis": ("127.0.0.1", 6379), "postgres": ("127.0.0.1", 5432), "rabbitmq": ("127.0.0.1", 5672)}


def reachable(name: str) -> bool:
    host, port = PORTS[name]
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require(name: str) -> None:
    if reachable(name):
        return
    host, port = PORTS[name]
    reason = f"{name} is not reachable on {host}:{port} (start it as .ci/services does)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI=true a missing service is a failure, not a skip")
    pytest.skip(reason)


def require_program(name: str) -> str:
    """The path of an OS program a test needs (``make test`` installs it: .ci/programs), skipped
    locally when it is absent, a failure under CI=true."""
    import shutil

    found = shutil.which(name)
    if found is not None:
        return found
    reason = f"{name} is not installed (bash .ci/programs installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI=true a missing program is a failure, not a skip")
    pytest.skip(reason)
