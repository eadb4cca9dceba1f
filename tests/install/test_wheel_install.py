"""The wheel as a user gets it: built from this tree, installed WITHOUT the dev extras into a fresh
virtual environment outside the checkout, and a real unwind run by a worker started from there, on
Redis + PostgreSQL and on the embedded default (issue 10 item 9, issue 12).

The dev extras (and the checkout on sys.path) hide missing dependencies; this test has neither.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import redis_db
from tests.services import PIP_TIMEOUT, REDIS_URL, require
from tests.worker_process import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.celery, pytest.mark.each_python]
REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the tree, so no build/ folder is left in (or reused from) the checkout."""
    out = tmp_path_factory.mktemp("wheel")
    src = out / "src"
    junk = (
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
    )
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*junk))
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        cwd=out,
        timeout=PIP_TIMEOUT,
    )
    (built,) = out.glob("saga_worker-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel and its postgres extra (what production installs), no dev extras."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "v")
    py = root / "v" / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", f"{wheel}[postgres]"], cwd=root, timeout=PIP_TIMEOUT)
    yield root / "v"


def test_the_wheel_holds_saga_worker_alone_no_top_level_tasks_or_config(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"saga_worker"}
    assert "saga_worker/celery/__init__.py" in names and "saga_worker/py.typed" in names


def test_the_installed_wheel_has_no_dev_extras_and_no_checkout_on_its_path(
    site: Path, tmp_path: Path
) -> None:
    probe = (
        "import importlib.util as u, json, saga_worker; from saga_worker.observing import tracing; "
        "print(json.dumps({'file': saga_worker.__file__, "
        "'pytest': u.find_spec('pytest') is not None, 'tasks': u.find_spec('tasks') is not None, "
        "'config': u.find_spec('config') is not None, "
        "'otel': u.find_spec('opentelemetry') is not None, 'tracing': tracing.ENABLED}))"
    )
    got = json.loads(_run([str(site / "bin" / "python"), "-c", probe], cwd=tmp_path, env=_clean_env()))
    assert got["file"].startswith(str(site)) and not got["pytest"]
    assert not got["tasks"] and not got["config"]
    # Without the otel extra the OpenTelemetry API is absent, and tracing is off (issue 27): the worker
    # below unwinds with it absent.
    assert not got["otel"] and got["tracing"] is False


def test_a_worker_from_the_installed_wheel_unwinds_a_run_on_redis_and_postgresql(
    site: Path, tmp_path: Path, pg_database_url: str
) -> None:
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    run_id = f"wheel-{uuid.uuid4().hex[:8]}"
    env = _clean_env(
        SAGA_JOURNAL_URL=pg_database_url,
        SAGA_BROKER_URL=url,
        SAGA_RESULT_BACKEND=url,
        SAGA_REDIS_URL=url,
        SAGA_QUEUE=f"saga-wheel-{uuid.uuid4().hex[:8]}",
        SAGA_TOOLS="saga_worker.demo:TOOLS",  # no default: a worker names its tools
        SAGA_HOME=str(tmp_path / "home"),
        PATH=f"{site / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    record = (
        "import sys; from saga_worker import open_journal, run_durable; "
        "from saga_worker.demo import TOOLS, order_planner; "
        "j = open_journal(sys.argv[1]); "
        "print(run_durable(sys.argv[2], journal=j, tools=TOOLS, planner=order_planner()).status)"
    )
    assert (
        _run(
            [str(site / "bin" / "python"), "-c", record, pg_database_url, run_id], cwd=tmp_path, env=env
        ).strip()
        == "finished"
    )
    worker = _Worker(site, env, tmp_path)
    try:
        unwind = (
            "import json, sys; from saga_worker.celery import compensate_run; "
            "print(json.dumps(compensate_run.delay(sys.argv[1]).get(timeout=90)))"
        )
        report = json.loads(
            _run([str(site / "bin" / "python"), "-c", unwind, run_id], cwd=tmp_path, env=env).splitlines()[-1]
        )
    finally:
        worker.stop()
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("send_email", "skipped-no-hook"),
        ("reserve_stock", "compensated"),
        ("charge", "compensated"),
    ]


def test_the_installed_wheels_demo_unwinds_on_the_embedded_default_with_its_own_worker(
    site: Path, tmp_path: Path
) -> None:
    env = _clean_env(SAGA_HOME=str(tmp_path / "home"))
    out = _run([str(site / "bin" / "saga-worker"), "demo", "--json"], cwd=tmp_path, env=env, timeout=180)
    report = json.loads(out[out.index("{\n") :] if "{\n" in out else out.splitlines()[-1])
    assert [e["status"] for e in report["entries"]] == ["skipped-no-hook", "compensated", "compensated"]
    assert report["condemned"] is True


class _Worker(WorkerProcess):
    """`saga-worker worker` of the installed wheel (its celery), outside the checkout."""

    def __init__(self, site: Path, env: dict[str, str], tmp: Path) -> None:
        super().__init__(
            ["celery", "-A", "saga_worker.celery:app", "worker", "-Q", env["SAGA_QUEUE"]],
            env,
            tmp / "wheel-worker.log",
            concurrency=1,
            beat=False,
            python=str(site / "bin" / "python"),
            cwd=tmp,
        )
        deadline = time.monotonic() + 60
        while not self.ready():
            assert time.monotonic() < deadline, f"worker not ready:\n{self.tail()}"
            time.sleep(0.2)
