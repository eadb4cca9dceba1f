"""Which Django the suite runs on (issue 50): 5.2 (LTS) on Python 3.11, the only one it admits there,
and 6.x on 3.12 and later (`make test-core` upgrades to it), so CI passes on both."""

from __future__ import annotations

import sys

import django


def test_the_suite_runs_django_6_on_python_3_12_and_later_and_5_2_on_3_11() -> None:
    expected = (6,) if sys.version_info >= (3, 12) else (5, 2)
    assert django.VERSION[: len(expected)] == expected, (
        f"Django {django.get_version()} on Python {sys.version.split()[0]}: "
        f"expected {'.'.join(map(str, expected))}.x (`make test-core` installs the newest the extra admits)"
    )
