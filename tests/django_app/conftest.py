"""The browser the admin's browser test drives: the console tests' headless Chromium."""

from tests.console.conftest import chromium  # noqa: F401 - a fixture, found here by pytest
