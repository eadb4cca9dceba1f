"""Where saga-worker relies on a dependency's internals, pyproject.toml bounds the dependency from above
(issue 24), and the installed version is one the bound admits and still has what is relied on: a
release that moves them fails here, not in a worker."""

from __future__ import annotations

import importlib.metadata
import inspect
import tomllib
import types
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


@pytest.mark.parametrize("name", ["kombu", "celery-redbeat", "celery"])
def test_the_dependency_has_an_upper_bound_that_the_installed_version_satisfies(name: str) -> None:
    req = requirement(name)
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in req.specifier), (
        f"{req} has no upper bound, but saga-worker relies on its internals"
    )
    installed = Version(importlib.metadata.version(name))
    assert req.specifier.contains(installed, prereleases=True), (
        f"installed {name} {installed} is outside {req}"
    )


def test_kombu_redis_channel_still_has_the_private_method_the_worker_patches() -> None:
    from kombu.transport import redis as kombu_redis

    from saga_worker.celery import transport

    create = transport._original
    assert create is getattr(kombu_redis.Channel, "_create_client", None) or (
        kombu_redis.Channel._create_client is transport._create_client  # type: ignore[attr-defined]  # private to kombu, not in its stubs
    ), "kombu's Channel._create_client is not the method saga_worker.celery.transport wraps"
    params = inspect.signature(create).parameters
    assert list(params)[:2] == ["self", "asynchronous"], f"Channel._create_client{inspect.signature(create)}"
    assert isinstance(inspect.getattr_static(kombu_redis.Channel, "pool"), property)


def _names_used(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def test_celerys_tracer_still_writes_a_result_as_text_with_its_module_global_saferepr() -> None:
    from celery.app import trace
    from celery.utils.saferepr import saferepr

    from saga_worker.celery import result_text

    assert trace.saferepr in (saferepr, result_text.saferepr), (  # type: ignore[attr-defined]
        "celery.app.trace has no module global saferepr for saga_worker.celery.result_text to replace"
    )
    assert "saferepr" in _names_used(trace.build_tracer.__code__), "Celery's tracer no longer calls saferepr"
    params = inspect.signature(saferepr).parameters
    assert list(params) == ["o", "maxlen", "maxlevels", "seen"], f"saferepr{inspect.signature(saferepr)}"
    assert params["maxlevels"].default == 3, (
        "saga_worker.celery.result_text writes Celery's default depth only"
    )


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
