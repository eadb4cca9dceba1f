"""``python -m tests.fleet [--runs N] [--repeats R]``: the fleet under faults (issue 46).

Cleans whatever an interrupted run left (processes in the fleet's namespaces, the namespaces, the state
folder), builds the network, runs the client (tests.fleet.drive) inside the ``client`` namespace, and
cleans again on the way out, whatever happened. Its output ends with the ``fleet:`` line.
"""

from __future__ import annotations

import subprocess
import sys

from .hosts import STATE, stop_leftovers
from .network import HOSTS, Network

DRIVE_LIMIT_S = 3 * 3600  # bounded even when asked for a very long run


def main() -> int:
    stop_leftovers()
    net = Network()
    try:
        net.build()
        STATE.mkdir(parents=True, exist_ok=True)
        argv = [*HOSTS["client"].exec_prefix(), sys.executable, "-m", "tests.fleet.drive", *sys.argv[1:]]
        return subprocess.run(argv, timeout=DRIVE_LIMIT_S).returncode
    finally:
        stop_leftovers()
        net.close()


if __name__ == "__main__":
    sys.exit(main())
