"""What a fleet run needs of the machine, and how its closing line is read (``make fleet`` and
``make fleet-upgrade`` alike)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.harness import REPO


def missing() -> list[str]:
    """What the fleet needs and this machine lacks (``.ci/programs`` installs the programs)."""
    out = [
        p
        for p in ("ip", "iptables-legacy", "initdb", "pg_ctl", "redis-server", "runuser")
        if not shutil.which(p)
    ]
    if not any(
        Path(p).exists()
        for p in ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime")
    ):
        out.append("libfaketime")
    if os.geteuid() != 0:
        out.append("root (network namespaces)")
    return out


def parse(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def run_harness(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` from the checkout, its output captured; or a skip (a failure under CI)
    when the machine lacks a part of the fleet."""
    lacking = missing()
    if lacking:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the fleet needs {lacking}")
        pytest.skip(f"the fleet needs {lacking}")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
