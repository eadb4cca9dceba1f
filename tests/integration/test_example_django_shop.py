"""examples/django_shop end to end (issue 22): the Django project as Celery's "First steps with Django"
lays it out, `manage.py migrate` making the journal's tables in Django's own PostgreSQL database, two
real workers (`celery -A proj worker -Q shop,saga`) on Redis, and the views driven by Django's test
client: an order placed (a saga() block and a chain of forward tasks sent on transaction.on_commit),
one declined inside atomic() (rolled back), one that calls a tool inside atomic() (refused), the
first cancelled with compensate_run.delay. The shop's ledger is the witness: every effect of the
cancelled order undone once, nothing at all for the other two. Also `manage.py test shop`: the
journal follows Django to its test database and does not block its teardown. And the README's "Run it"
commands as written, from `pip install -r requirements.txt` in a fresh virtual environment to
`manage.py test shop`, beat included (issue 50)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.faults.harness import OwnPostgres
from tests.services import PG_ADMIN_URL, PIP_TIMEOUT, REDIS_URL, require
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
        [sys.executable, "-m", "saga_worker.cli", "report", "shop-order-A", "--json"],
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
    code = "from saga_worker.contrib.django import journal; print(journal().get_run('shop-order-t-1'))"
    listed = manage(env, "shell", "-c", code)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip().splitlines()[-1] == "None"


README = SHOP / "README.md"
REPO = SHOP.parents[1]
# The README's lines that run until stopped: started in the background, each in a terminal of its own.
LONG_RUNNING = ("celery -A proj worker", "celery -A proj beat", "python manage.py runserver")


def readme_commands() -> list[str]:
    """The lines of the README's "Run it" block, as written."""
    text = README.read_text()
    block = text[text.index("## Run it") :].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


class Background:
    """One README line that runs until stopped, in a process group of its own, its output in a log."""

    def __init__(self, line: str, *, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.line, self.log = line, log
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["bash", "-c", line],
            cwd=cwd,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def says(self, text: str) -> bool:
        assert self.proc.poll() is None, f"{self.line!r} exited:\n{self.log.read_text()[-3000:]}"
        return text in self.log.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._out.close()


def start(line: str, *, cwd: Path, env: dict[str, str], log: Path) -> Background:
    """A long-running line, once it is up: a worker ready, beat started, the server listening."""
    started = Background(line, cwd=cwd, env=env, log=log)
    if line.startswith("celery -A proj worker"):
        wait_for(lambda: started.says(" ready."), READY_TIMEOUT_S, line)
    elif line.startswith("celery -A proj beat"):
        wait_for(lambda: started.says("beat: Starting"), READY_TIMEOUT_S, line)
    else:
        wait_for(lambda: listening(8000), READY_TIMEOUT_S, line)
    return started


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def order(n: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:8000/orders/{n}/", timeout=10) as response:
        return dict(json.loads(response.read()))


def test_the_readme_s_commands_run_as_written_from_a_fresh_virtual_environment(tmp_path: Path) -> None:
    require("redis")
    assert not listening(8000), "port 8000 is taken: the README's runserver needs it"
    src = tmp_path / "src"  # a copy of the checkout: `pip install` builds in the tree it is given
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".venv*",
            ".git",
            "build",
            "dist",
            "site",
            "*.egg-info",
            ".saga",
            "__pycache__",
            "*.db",
            ".*_cache",
        ),
    )
    shop = src / "examples" / "django_shop"
    venv.EnvBuilder(with_pip=True, clear=True).create(tmp_path / "v")
    pg = OwnPostgres()  # `createdb shop` as written, on a server of the test's own
    pg.init()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SAGA_", "SHOP_", "PYTHON", "DJANGO_", "VIRTUAL_ENV", "PG"))
    }
    env.update(
        PATH=f"{tmp_path / 'v' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(tmp_path / "v"),
        PGHOST="127.0.0.1",
        PGPORT=str(pg.port),
        PGUSER="postgres",
        SHOP_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{pg.port}/shop",
        SHOP_BROKER_URL=REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}",  # the queues as written, alone
        COLUMNS="200",
    )
    background: list[Background] = []
    out: dict[str, str] = {}  # each line's standard output
    try:
        for n, line in enumerate(readme_commands()):
            if line.startswith(LONG_RUNNING):
                background.append(start(line, cwd=shop, env=env, log=tmp_path / f"{n}.log"))
                continue
            done = subprocess.run(
                ["bash", "-c", line], cwd=shop, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT
            )
            assert done.returncode == 0, f"{line!r} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            out[line.split("#")[0].strip()] = done.stdout
            if line.startswith("curl -X POST localhost:8000/orders/ "):
                wait_for(lambda: (order("7")["run"] or {}).get("status") == "finished", 60, "the order's run")
            elif line.startswith("curl -X POST localhost:8000/orders/7/cancel/"):
                wait_for(lambda: len(order("7")["effects"]) == 6, 60, "the order to be undone")
        worker_log = background[0].log
        # Beat sends the sweeper (install(app) put its entry in the project's beat schedule).
        wait_for(lambda: b"saga.retry_uncertain" in worker_log.read_bytes(), 60, "a sweep from beat")
    finally:
        for each in background:
            each.stop()
        pg.close()

    assert "Applying saga_worker.0001_journal... OK" in out["python manage.py migrate"]
    placed = json.loads(out['curl -X POST localhost:8000/orders/ -d \'{"order_id": "7", "amount": 30}\''])
    assert placed == {"order_id": "7", "run_id": "shop-order-7"}
    assert json.loads(out["curl localhost:8000/orders/7/"])["effects"] == ["charge", "hold", "reserve"]
    assert "task_id" in json.loads(out["curl -X POST localhost:8000/orders/7/cancel/"])
    report = out["python manage.py saga report shop-order-7"]
    assert "shop-order-7" in report and report.count("compensated") >= 3
    (run,) = json.loads(out["saga-worker --django-settings proj.settings runs --json"])
    assert run["run_id"] == "shop-order-7" and run["condemned"] is True
    assert readme_commands()[-1].startswith("python manage.py test shop")
    assert "Ran 1 test" in done.stderr and "OK" in done.stderr
