"""saga_worker.celery is the library's Celery layer: it needs no top-level ``tasks`` or ``config``
package, creates nothing on import, and the checkout's shims hand out the very same tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_library_celery_layer_works_outside_a_checkout_without_tasks_or_config_packages(
    tmp_path: Path,
) -> None:
    got = _probe(tmp_path, {"SAGA_HOME": str(tmp_path / "home")})
    assert got["before"] == [] and got["after"] == []
    assert got["names"] == [
        "saga.compensate_run",
        "saga.compensate_step",
        "saga.finalize_unwind",
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
