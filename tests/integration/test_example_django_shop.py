"""examples/django_shop end to end (issue 22): the Django project as Celery's "First steps with Django"
lays it out, `manage.py migrate` making the journal's tables in Django's own PostgreSQL database, two
real workers (`celery -A proj worker -Q shop,saga`) on Redis, and the views driven by Django's test
client: an order placed (a saga() block and a chain of forward tasks sent on transaction.on_commit),
one declined inside atomic() (rolled back), one that calls a tool inside atomic() (refused), the
first cancelled with compensate_run.delay. The shop's ledger is the witness: every effect of the
cancelled order undone once, nothing at all for the other two. Also `manage.py test shop`: the
journal follows Django to its test database and does not block its teardown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.services import PG_ADMIN_URL, REDIS_URL, require
from tests.worker_process import WorkerProcess

from .conftest import READY_TIMEOUT_S, redis_db, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"

DRIVE = r"""
import json, time, django
django.setup()
from celery.result import AsyncResult
from django.test import Client
from proj.celery import app

c = Client()
def post(path, body=None):
    r = c.post(path, json.dumps(body or {}), content_type="application/json")
    return r.status_code, r.json()
def get(order_id):
    return c.get(f"/orders/{order_id}/").json()

out = {"placed": post("/orders/", {"order_id": "A", "amount": 30}),
       "declined": post("/orders/", {"order_id": "B", "amount": 40, "decline": True}),
       "inside": post("/orders/", {"order_id": "C", "amount": 50, "hold_inside_transaction": True})}
deadline = time.monotonic() + 60
while (get("A")["run"] or {}).get("status") != "finished":
    assert time.monotonic() < deadline, get("A")
    time.sleep(0.2)
out["before"] = get("A")
for n in (1, 2):
    status, body = post("/orders/A/cancel/")
    out[f"cancel{n}"] = [status, AsyncResult(body["task_id"], app=app).get(timeout=60)]
out.update({k: get(k) for k in "ABC"})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require("postgres")
    require("redis")
    name = f"djshop_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))  # empty: `manage.py migrate` makes every table
    tag = uuid.uuid4().hex[:8]
    db = sa.engine.make_url(PG_ADMIN_URL).set(drivername="postgresql", database=name)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "SHOP_", "PYTHONPATH", "DJANGO_"))
    }
    env.update(
        SHOP_DATABASE_URL=db.render_as_string(hide_password=False),
        SHOP_BROKER_URL=REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}",
        SHOP_QUEUE=f"shop-{tag}",
        SHOP_SAGA_QUEUE=f"saga-{tag}",
        DJANGO_SETTINGS_MODULE="proj.settings",
    )
    try:
        yield env
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "test_{name}" WITH (FORCE)'))
        admin.dispose()


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_an_order_is_placed_by_a_view_and_a_chain_then_cancelled_and_undone_once_while_the_rolled_back_ones_leave_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    migrated = manage(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying saga_worker.0001_journal... OK" in migrated.stdout
    queues = f"{env['SHOP_QUEUE']},{env['SHOP_SAGA_QUEUE']}"
    workers = [
        WorkerProcess(
            ["celery", "-A", "proj", "worker", "-Q", queues],
            env,
            tmp_path / f"worker-{n}.log",
            concurrency=1,
            beat=False,
            name=f"djshop{n}-",
            cwd=SHOP,
        )
        for n in (1, 2)
    ]
    try:
        for worker in workers:
            wait_for(worker.ready, READY_TIMEOUT_S, f"a shop worker to be ready:\n{worker.tail()}")
        banner = workers[0].log.read_text()
        assert ". tools:   shop.tools:TOOLS" in banner and f". queue:   {env['SHOP_SAGA_QUEUE']}" in banner
        drive = subprocess.run(
            [sys.executable, "-c", DRIVE], cwd=SHOP, env=env, capture_output=True, text=True, timeout=240
        )
        assert drive.returncode == 0, drive.stderr + "\n" + workers[0].tail() + "\n" + workers[1].tail()
        out = json.loads(drive.stdout.strip().splitlines()[-1])
    finally:
        for worker in workers:
            worker.stop()

    assert out["placed"][0] == 201
    assert out["before"]["effects"] == ["charge", "hold", "reserve"]
    status, report = out["cancel1"]
    assert status == 202 and report["condemned"] is True
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("reserve", "compensated"),
        ("charge", "compensated"),
        ("hold", "compensated"),
    ]
    assert [e["status"] for e in out["cancel2"][1]["entries"]] == ["already-compensated"] * 3
    # Every effect of the cancelled order undone exactly once (one ledger row per idempotency key).
    assert out["A"]["effects"] == ["charge", "hold", "refund", "release", "release_hold", "reserve"]
    assert out["A"]["run"] == {"status": "finished", "condemned": True}
    # Declined inside atomic(): rolled back, and the on_commit send never happened.
    assert out["declined"][0] == 409
    assert out["B"] == {"order_id": "B", "placed": False, "run": None, "effects": []}
    # A tool called inside atomic(): refused before anything was executed, naming the way out.
    status, body = out["inside"]
    assert status == 409 and "transaction.on_commit" in body["error"]
    assert "open atomic() block of Django database 'default'" in body["error"]
    # Nor is its run started (issue 43): no run left `running` that nothing would ever continue.
    assert out["C"] == {"order_id": "C", "placed": False, "run": None, "effects": []}

    # The CLI sets Django up from DJANGO_SETTINGS_MODULE: the same journal, in Django's database.
    cli = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "report", "order-A", "--json"],
        cwd=SHOP,
        env={**env, "PYTHONPATH": str(SHOP)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["run"]["condemned"] is True


def test_manage_py_test_journals_into_the_test_database_eagerly_and_drops_it_cleanly(
    env: dict[str, str],
) -> None:
    ran = manage(env, "test", "shop", "--noinput", timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ran 1 test" in ran.stderr and "OK" in ran.stderr
    assert "Destroying test database for alias 'default'" in ran.stderr
    # Nothing went into the development database's journal (manage.py migrate made it, if not already).
    assert manage(env, "migrate").returncode == 0
    code = "from saga_worker.contrib.django import journal; print(journal().get_run('order-t-1'))"
    listed = manage(env, "shell", "-c", code)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip().splitlines()[-1] == "None"
