"""The fleet tier runs only when asked (``make fleet``: ``-m fleet``, or ``SAGA_FLEET=1``): it builds
network namespaces and servers of its own, as root, for minutes."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("markexpr", "") or ""
    if os.environ.get("SAGA_FLEET") == "1" or ("fleet" in markexpr and "not fleet" not in markexpr):
        return
    skip = pytest.mark.skip(
        reason="fleet tier: run it with `make fleet`, `make fleet-upgrade` (or SAGA_FLEET=1)"
    )
    for item in items:
        if "fleet" in item.keywords:
            item.add_marker(skip)
