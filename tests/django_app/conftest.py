"""The browser the admin's browser test drives: the console tests' headless Chromium."""

from tests.console.conftest import chromium  # noqa: F401 - a fixture, found here by pytest

# The test project's own tests run in it, under its runners (test_admin.py), never in this suite.
collect_ignore_glob = ["project/*"]
