"""Fault points cannot be armed outside the test harness (issue 11): importing saga_worker with
SAGA_FAULTS set arms nothing, and arming needs the harness's explicit ``faults.enable()``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga_worker.core import faults
from tests.worker_process import REPO


def test_saga_faults_in_the_environment_arms_nothing_at_import(tmp_path: Path) -> None:
    (tmp_path / "always.kill").write_text("before_hook=kill")
    env = {**os.environ, "SAGA_FAULTS": "before_hook=kill", "SAGA_FAULTS_DIR": str(tmp_path)}
    probe = "from saga_worker.core import faults; faults.point('before_hook', 'k'); print(faults.enabled())"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr  # not SIGKILLed at the point
    assert done.stdout.strip() == "False"
    assert not (tmp_path / "fired.log").exists()


def test_arming_a_process_the_harness_did_not_enable_is_refused_with_a_clear_error() -> None:
    was_enabled = faults.enabled()
    faults.disable()
    try:
        with pytest.raises(faults.FaultsNotEnabledError, match=r"faults\.enable\(\)"):
            faults.configure("before_hook=kill")
        faults.configure()  # disarming is always allowed
        faults.point("before_hook", "k")
    finally:
        if was_enabled:
            faults.enable()
