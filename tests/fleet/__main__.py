"""``python -m tests.fleet [--runs N] [--repeats R]``: the fleet under faults (issue 46).

Cleans whatever an interrupted run left (processes in the fleet's namespaces, the namespaces, the state
folder), builds the network, runs the client (tests.fleet.drive) inside the ``client`` namespace, and
cleans again on the way out, whatever happened (keeping the hosts' logs in ``SAGA_FLEET_LOGS``). Its output ends with the ``fleet:`` line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .hosts import STATE, stop_leftovers
from .network import HOSTS, Network

LOGS = Path(os.environ.get("SAGA_FLEET_LOGS", "/tmp/saga-fleet-logs"))
DRIVE_LIMIT_S = 3 * 3600  # bounded even when asked for a very long run


def keep_logs() -> None:
    """Copy the hosts' logs (workers, delayers, PostgreSQL) out of the state folder before it goes."""
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    for path in STATE.rglob("*"):
        if path.is_file() and (path.suffix == ".log" or path.name == "log"):
            shutil.copy(path, LOGS / "-".join(path.relative_to(STATE).parts))


def main(drive: str = "tests.fleet.drive", args: list[str] | None = None) -> int:
    """Run the client module ``drive`` with ``args`` (default: this command's) in the fleet."""
    stop_leftovers()
    net = Network()
    try:
        net.build()
        STATE.mkdir(parents=True, exist_ok=True)
        given = sys.argv[1:] if args is None else args
        argv = [*HOSTS["client"].exec_prefix(), sys.executable, "-m", drive, *given]
        return subprocess.run(argv, timeout=DRIVE_LIMIT_S).returncode
    finally:
        keep_logs()
        stop_leftovers()
        net.close()


if __name__ == "__main__":
    sys.exit(main())
