"""The clock a SQLite journal judges compensation leases by: this boot's monotonic clock, with the boot's id.

A wall clock can step (an NTP correction, a person setting it, a virtual machine restored): judged
by it, a live lease looks expired to a process whose clock jumped forward, and the same hook runs
twice at once. The processes that share a SQLite file share one machine, and on Linux its
CLOCK_MONOTONIC (``time.monotonic``) is one clock for every process of a boot and never steps. It
restarts at each boot, so a lease stores the boot's id beside its deadline, and a lease of another
boot is expired: every process that could hold it ended with that boot.

Where the kernel gives no boot id, a monotonic deadline could not be told from a previous boot's (a
reboot would leave every lease looking live for as long as that boot had been up), so leases there
are judged by the wall clock, the one clock that survives a reboot (docs/reference/compensation.md).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def boot_id() -> str | None:
    """This boot's id (a fresh random uuid at each boot), or None where the kernel gives none."""
    try:
        text = BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text[:64] or None


def reading() -> dict[str, object]:
    """The bound parameters a lease statement reads this clock from: ``boot`` and ``mono`` (both
    None where there is no boot id: the statement then writes and judges the wall-clock lease only)."""
    boot = boot_id()
    return {"boot": boot, "mono": None if boot is None else time.monotonic()}
