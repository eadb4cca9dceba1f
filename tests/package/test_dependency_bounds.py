"""Where saga-worker relies on a dependency's internals, pyproject.toml bounds the dependency from above
(issue 24), and the installed version is one the bound admits and still has what is relied on: a
release that moves them fails here, not in a worker."""

from __future__ import annotations

import importlib.metadata
import inspect
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def requirement(name: str) -> Requirement:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    found = [Requirement(d) for d in deps if Requirement(d).name == name]
    assert len(found) == 1, f"{name} should be named once in [project].dependencies, found {found}"
    return found[0]


@pytest.mark.parametrize("name", ["celery-redbeat", "celery"])
def test_the_dependency_has_an_upper_bound_that_the_installed_version_satisfies(name: str) -> None:
    req = requirement(name)
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in req.specifier), (
        f"{req} has no upper bound, but saga-worker relies on its internals"
    )
    installed = Version(importlib.metadata.version(name))
    assert req.specifier.contains(installed, prereleases=True), (
        f"installed {name} {installed} is outside {req}"
    )


def test_the_result_text_patch_was_checked_against_the_installed_celery_and_applies_to_it() -> None:
    """A release outside the patch's checked range would run without it (slower, unseen): it fails here."""
    from saga_worker.celery import checked_releases, result_text

    installed = Version(importlib.metadata.version("celery"))
    assert checked_releases.CELERY_TRACER_TEXT.contains(installed, prereleases=True), (
        f"celery {installed} is outside checked_releases.CELERY_TRACER_TEXT: check the patch, then raise it"
    )
    assert result_text._still_there(), f"celery {installed} no longer has what result_text replaces"


def test_celerys_bound_is_the_release_store_once_was_checked_up_to() -> None:
    from saga_worker.celery import checked_releases

    uppers = [str(s) for s in requirement("celery").specifier if s.operator == "<"]
    assert uppers == [str(s) for s in checked_releases.CELERY_RESULT_STORE if s.operator == "<"], uppers


def test_redbeat_still_has_what_the_resilient_scheduler_uses() -> None:
    from redbeat import schedulers

    assert callable(schedulers.ensure_conf) and callable(schedulers.get_redis)
    tick = inspect.signature(schedulers.RedBeatScheduler.tick).parameters
    assert "min" in tick, f"RedBeatScheduler.tick{inspect.signature(schedulers.RedBeatScheduler.tick)}"


def test_the_otel_extra_is_bounded_and_the_api_still_keeps_its_global_provider_where_tracing_reads_it() -> (
    None
):
    # saga_worker.observing.tracing reads opentelemetry.trace._TRACER_PROVIDER (None until a provider is set) so
    # that its span sites do not look the environment up on every call; an API that moved it would
    # silently cost that lookup again at every span site.
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["otel"]
    req = next(Requirement(d) for d in extras if Requirement(d).name == "opentelemetry-api")
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in req.specifier), req
    assert req.specifier.contains(Version(importlib.metadata.version("opentelemetry-api")), prereleases=True)
    from opentelemetry import trace

    from saga_worker.observing import tracing

    assert hasattr(trace, "_TRACER_PROVIDER") and tracing._PROVIDER_KEPT


def test_the_django_extra_is_bounded_and_django_still_has_what_the_atomic_probe_reads() -> None:
    # saga_worker.contrib.django.apps.open_atomic_block reads each connection's atomic_blocks and an
    # Atomic's _from_testcase (a TestCase's own per-test block), both Django's internals.
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["django"]
    req = next(Requirement(d) for d in extras if Requirement(d).name == "django")
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in req.specifier), req
    assert req.specifier.contains(Version(importlib.metadata.version("django")), prereleases=True)
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.transaction import Atomic

    assert "initialized_only" in inspect.signature(connections.all).parameters
    assert "self.atomic_blocks = []" in inspect.getsource(BaseDatabaseWrapper.__init__)
    assert Atomic("default", True, False)._from_testcase is False
