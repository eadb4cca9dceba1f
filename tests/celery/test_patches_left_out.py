"""On a Celery release the worker's speed patch was not checked against, the worker leaves the patch
out, says so once, and runs Celery's own code."""

from __future__ import annotations

import logging

import pytest
from celery.app import trace
from celery.utils.saferepr import saferepr as celery_saferepr
from packaging.version import Version

from saga_worker.celery import checked_releases, result_text


@pytest.fixture
def newer_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checked_releases, "installed_version", lambda distribution: Version("5.8.0"))
    # Another test of this process may have applied the patch: start from Celery's own code.
    monkeypatch.setattr(trace, "saferepr", celery_saferepr)


@pytest.mark.usefixtures("newer_releases")
def test_on_a_newer_celery_the_tracer_keeps_its_own_result_text(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=checked_releases.__name__):
        assert result_text.speed_up_result_text() is False
    assert trace.saferepr is celery_saferepr  # type: ignore[attr-defined]
    assert "celery 5.8.0 is outside the releases checked for a result's text written directly" in caplog.text


def test_a_release_that_moved_the_private_part_gets_no_patch_either(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(trace, "saferepr", lambda o, maxlen=None: repr(o))  # a tracer that changed
    with caplog.at_level(logging.WARNING, logger=checked_releases.__name__):
        assert result_text.speed_up_result_text() is False
    assert trace.saferepr is not result_text.saferepr  # type: ignore[attr-defined]
    assert "no longer has what a result's text written directly replaces" in caplog.text


def test_on_the_checked_releases_the_patch_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "saferepr", celery_saferepr)
    assert result_text.speed_up_result_text() is True
    assert trace.saferepr is result_text.saferepr  # type: ignore[attr-defined]


def test_a_tracer_without_build_tracer_gets_no_patch_and_no_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(trace, "saferepr", celery_saferepr)
    monkeypatch.delattr(trace, "build_tracer")  # a release that reorganised its tracer
    with caplog.at_level(logging.WARNING, logger=checked_releases.__name__):
        assert result_text.speed_up_result_text() is False
    assert trace.saferepr is celery_saferepr  # type: ignore[attr-defined]
    assert "no longer has what a result's text written directly replaces" in caplog.text
