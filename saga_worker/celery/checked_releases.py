"""The releases of Celery whose private parts saga-worker's worker patch was checked against, and the
check made before applying it.

A patch (``result_text.py``: Celery's tracer writes a result's text directly) replaces something
private to its dependency, and pays more than 5% of a distributed unwind's worker CPU
(``python -m bench.private_patches``). It is applied only on a release inside its range and only
while the replaced part is still what the patch expects;
on any other release the worker runs the dependency's own code, which does the same work more
slowly, and logs once, as a WARNING (the worker runs slower than saga-worker is measured at), which
patch it left out and why. ``tests/package/test_dependency_bounds.py``
checks that every range covers the release installed, so a range that falls behind fails a test
rather than slowing a worker down unseen.
"""

from __future__ import annotations

import importlib.metadata
import logging

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

log = logging.getLogger(__name__)

# The releases each patch was checked against (raised after checking a new minor release).
CELERY_TRACER_TEXT = SpecifierSet(">=5.5,<5.8")
# Not a patch: the releases whose Redis result backend ``result_store.store_once`` writes as Celery
# does, in one script (elsewhere it reads, then calls Celery's ``store_result``).
CELERY_RESULT_STORE = SpecifierSet(">=5.5,<5.8")


def installed_version(distribution: str) -> Version | None:
    """The installed release of ``distribution``, or None when it cannot be read."""
    try:
        return Version(importlib.metadata.version(distribution))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return None


def may_patch(patch: str, distribution: str, checked: SpecifierSet, *, still_there: bool) -> bool:
    """Whether ``patch`` may be applied to the installed ``distribution``: a release inside
    ``checked`` whose private part is ``still_there``; if not, says why it is left out."""
    version = installed_version(distribution)
    if version is None or not checked.contains(version, prereleases=True):
        log.warning(
            "saga-worker: %s %s is outside the releases checked for %s (%s): %s's own code is used",
            distribution,
            version or "(version unknown)",
            patch,
            checked,
            distribution,
        )
        return False
    if not still_there:
        log.warning(
            "saga-worker: %s %s no longer has what %s replaces: %s's own code is used",
            distribution,
            version,
            patch,
            distribution,
        )
        return False
    return True


__all__ = ["CELERY_RESULT_STORE", "CELERY_TRACER_TEXT", "installed_version", "may_patch"]
