"""Beat's last sweep is kept per deployment (issue 48): two deployments sharing one Redis result
backend, on queues of their own, each read only their own sweeps, so a beat that stopped is told
overdue even while another deployment's beat sweeps on."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery

from saga_worker.celery.health import last_sweep, note_sweep
from tests.integration.conftest import redis_db
from tests.services import REDIS_URL, require

pytestmark = pytest.mark.redis


def test_a_sweep_is_read_back_by_its_own_deployment_only() -> None:
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    app = Celery("last-sweep-test", broker=url, backend=url)
    mine, theirs = f"saga-a-{uuid.uuid4().hex[:8]}", f"saga-b-{uuid.uuid4().hex[:8]}"
    try:
        assert last_sweep(app, mine) is None
        note_sweep(app, theirs, {"redriven": ["run-1"]})
        assert last_sweep(app, mine) is None  # another deployment's sweep says nothing of this one's beat
        swept = last_sweep(app, theirs)
        assert swept is not None
        note_sweep(app, mine, {})
        again = last_sweep(app, mine)
        assert again is not None and again >= swept
        assert last_sweep(app, theirs) == swept
    finally:
        app.close()
