"""saga_worker.celery is the library's Celery layer: it needs no top-level ``tasks`` or ``config``
package, creates nothing on import, and the checkout's shims hand out the very same tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import saga_worker, saga_worker.cli, saga_worker.celery as c
before = sorted(m for m in sys.modules if m.split(".")[0] in ("tasks", "config"))
app = c.app
names = sorted(n for n in app.tasks if n.startswith("saga."))
after = sorted(m for m in sys.modules if m.split(".")[0] in ("tasks", "config"))
print(json.dumps({"before": before, "after": after, "names": names,
                  "delay_name": c.compensate_run.name, "app_main": app.main}))
"""


def _probe(cwd: Path, env_extra: dict[str, str]) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_") and k != "PYTHONPATH"}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return cast(
        dict[str, object], json.loads(out.stdout.strip().splitlines()[-1])
    )  # the probe prints one JSON object


def test_library_celery_layer_works_outside_a_checkout_without_tasks_or_config_packages(
    tmp_path: Path,
) -> None:
    got = _probe(tmp_path, {"SAGA_HOME": str(tmp_path / "home")})
    assert got["before"] == [] and got["after"] == []
    assert got["names"] == [
        "saga.compensate_run",
        "saga.compensate_step",
        "saga.finalize_unwind",
        "saga.prune",
        "saga.retry_uncertain",
    ]
    assert got["delay_name"] == "saga.compensate_run"


def test_importing_saga_worker_celery_creates_no_app_and_no_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code = "import saga_worker.celery as c; print(c._default is None)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env["SAGA_HOME"] = str(home)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
    assert not home.exists()


def test_checkout_shim_tasks_hands_out_the_library_app_and_tasks() -> None:
    import saga_worker.celery as library
    import tasks

    assert tasks.app is library.default_app()
    assert tasks.compensate_run.name == "saga.compensate_run"
    assert tasks.app.tasks["saga.compensate_run"] is library.compensate_run._get_current_object()


def _celery_worker(tmp_path: Path, env_extra: dict[str, str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env.update({"SAGA_HOME": str(tmp_path / "home"), "SAGA_QUEUE": f"saga-pkg-{tmp_path.name}", **env_extra})
    argv = [sys.executable, "-m", "celery", "-A", "saga_worker.celery:app", "worker", "--pool", "solo"]
    argv += ["--loglevel", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    return subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_a_celery_worker_of_the_saga_tasks_with_no_tools_refuses_to_start_and_says_why(
    tmp_path: Path,
) -> None:
    proc = _celery_worker(tmp_path, {})
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0, output
    assert "celery worker: no tools configured: set SAGA_TOOLS=" in output
    assert "ready." not in output


def test_the_worker_banner_names_its_journal_redacted_its_broker_and_its_tools(tmp_path: Path) -> None:
    journal = "postgresql+psycopg://shop:s3cret-pw@127.0.0.1:5432/shop"  # opened on first task, not at start
    proc = _celery_worker(tmp_path, {"SAGA_TOOLS": "saga_worker.demo:TOOLS", "SAGA_JOURNAL_URL": journal})
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if " ready." in line or len(lines) > 400:
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    banner = "".join(lines)
    assert "[saga-worker]" in banner, banner
    assert ". journal: postgresql+psycopg://shop:***@127.0.0.1:5432/shop" in banner
    assert "s3cret-pw" not in banner
    assert f". broker:  sqla+sqlite:///{(tmp_path / 'home' / 'broker.db').resolve()}" in banner
    assert ". tools:   saga_worker.demo:TOOLS" in banner
    assert f". queue:   saga-pkg-{tmp_path.name}" in banner


SIGNALS_PROBE = """
import json, weakref
from celery import Celery, signals
from celery.utils.dispatch import Signal

def ours():
    found = {}
    for name in sorted(dir(signals)):
        signal = getattr(signals, name)
        if not isinstance(signal, Signal):
            continue
        for _, ref in signal.receivers:
            fn = ref() if isinstance(ref, weakref.ReferenceType) else ref
            if fn is not None and getattr(fn, "__module__", "").startswith("saga_worker"):
                found.setdefault(name, []).append(fn.__qualname__)
    return {k: sorted(v) for k, v in found.items()}

import saga_worker, saga_worker.celery, saga_worker.celery.tasks
imported = ours()
from saga_worker.celery import install, make_app
make_app()
made = ours()
make_app()
for _ in range(2):
    install(Celery("host", set_as_current=False), beat=False)
print(json.dumps({"imported": imported, "made": made, "again": ours()}))
"""


def test_importing_the_tasks_connects_no_signal_handler_and_the_app_factory_and_install_connect_each_once(
    tmp_path: Path,
) -> None:
    """Celery's signals are global: a handler connected at import would act in every process that
    imports saga_worker.celery. The app factory and install(app) connect them, each once however
    often they are called."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env["SAGA_HOME"] = str(tmp_path / "home")
    out = subprocess.run(
        [sys.executable, "-c", SIGNALS_PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imported"] == {}
    made = got["made"]
    assert sorted(made) == [
        "after_setup_logger",
        "after_setup_task_logger",
        "celeryd_after_setup",
        "task_received",
        "worker_init",
        "worker_process_init",
        "worker_process_shutdown",
        "worker_ready",
    ]
    assert sum(len(handlers) for handlers in made.values()) == 11
    assert all(len(set(handlers)) == len(handlers) for handlers in made.values())
    assert got["again"] == made
