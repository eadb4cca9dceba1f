"""Fault points a test can arm, inert otherwise (the fault-injection suite, tests/faults).

The engine and the Celery tasks call ``point("after_claim", key)`` at the moments where a crash is
most interesting: after the claim, before the hook, after the hook, after the outcome is written,
and before the ack. Unarmed, a point is one global read and a return.

Nothing arms a point unless the process first calls :func:`enable`, which no production code does:
only the test harness (``tests/faults``: its conftest, ``tests.faults.child`` and
``tests.faults.celery_worker``) calls it. A stray ``SAGA_FAULTS`` in a production worker's
environment is never read, so it cannot SIGKILL that worker. Once enabled, the process is armed
from its environment (so a child started by the harness inherits its rules), or by
:func:`configure`:

- ``SAGA_FAULTS="before_hook=kill,after_hook=sleep:5@order-7"``: rules for this process. A rule is
  ``point=action[:arg][@match][*times]``; ``match`` is a substring of the key, ``times`` how often it
  fires in this process (default: every time).
- ``SAGA_FAULTS_DIR=/some/folder``: each file in the folder holds one rule and fires **once** across
  all processes (the first process to rename it to ``<name>.fired-<pid>`` owns it). A file whose name
  starts with ``always.`` is never consumed. Every firing is appended to ``fired.log`` there.

Actions: ``kill`` (SIGKILL this process), ``stop`` (SIGSTOP it, a test sends SIGCONT), ``exit``
(``os._exit(70)``), ``raise`` (:class:`InjectedFault`), ``crash`` (:class:`InjectedCrash`, a
``BaseException`` that unwinds like a dying process: no ``except Exception`` writes an outcome) and
``sleep:SECONDS``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

POINTS = (
    "after_claim",
    "before_hook",
    "after_hook",
    "after_outcome",
    # the in-process unwind's merged commit: a step's outcome written, the next step's claim not yet
    "before_next_claim",
    # the in-process unwind's first commit: the tombstone and the first step's claim committed, no hook yet
    "after_first_claim",
    "before_ack",
    # inside a tool's own hooks: a test tool calls these to put a fault mid-effect
    "mid_hook",
    "mid_execute",
    # a forward call about to take the tombstone gate: the claim (or reclaim) that starts an execute
    "before_gate",
)
ACTIONS = ("kill", "stop", "exit", "raise", "crash", "sleep")


class InjectedFault(Exception):
    """Raised at an armed point with action ``raise``."""


class InjectedCrash(BaseException):
    """Raised at an armed point with action ``crash``: unwinds the stack like a process dying there."""


@dataclass
class Rule:
    point: str
    action: str
    arg: float = 0.0
    match: str = ""
    times: int = -1  # -1: every time
    fired: int = field(default=0, compare=False)
    # action ``call`` only (armed by ``calling``, never from text): what to call at the point
    callback: Callable[[str, str], object] | None = field(default=None, compare=False)

    def applies(self, name: str, key: str) -> bool:
        return self.point == name and self.match in key and (self.times < 0 or self.fired < self.times)


def parse_rule(text: str) -> Rule:
    """``point=action[:arg][@match][*times]`` → Rule; raises ValueError naming what is wrong."""
    text = text.strip()
    name, sep, rest = text.partition("=")
    if not sep or name not in POINTS:
        raise ValueError(f"fault rule {text!r}: expected point=action with point one of {', '.join(POINTS)}")
    times = -1
    if "*" in rest:
        rest, _, count = rest.rpartition("*")
        times = int(count)
    match = ""
    if "@" in rest:
        rest, _, match = rest.partition("@")
    action, _, arg = rest.partition(":")
    if action not in ACTIONS:
        raise ValueError(f"fault rule {text!r}: action must be one of {', '.join(ACTIONS)}")
    return Rule(name, action, float(arg) if arg else 0.0, match, times)


_rules: list[Rule] = []
_dir = ""
_armed = False
_enabled = False


class FaultsNotEnabledError(RuntimeError):
    """``configure`` was called in a process where the test harness did not ``enable`` faults."""


def enable() -> None:
    """Allow fault points in this process, and arm it from ``SAGA_FAULTS`` / ``SAGA_FAULTS_DIR``.

    For the test harness only: production code never calls it, which is what keeps a stray variable
    from arming a production worker."""
    global _enabled
    _enabled = True
    configure(os.environ.get("SAGA_FAULTS", ""), os.environ.get("SAGA_FAULTS_DIR", ""))


def disable() -> None:
    """Disarm this process and forbid arming it again until the next ``enable``."""
    global _enabled
    configure()
    _enabled = False


def enabled() -> bool:
    return _enabled


def configure(spec: str = "", directory: str = "") -> None:
    """(Re)arm this process with rules, as ``SAGA_FAULTS`` / ``SAGA_FAULTS_DIR`` would; empty disarms.

    Raises FaultsNotEnabledError for a rule in a process where ``enable`` was not called."""
    global _rules, _dir, _armed
    rules = [parse_rule(part) for part in spec.split(",") if part.strip()]
    if (rules or directory) and not _enabled:
        raise FaultsNotEnabledError(
            "fault injection is not enabled in this process: only the test harness arms fault points "
            "(saga_worker.core.faults.enable())"
        )
    _rules, _dir = rules, directory
    _armed = bool(_rules or _dir)


@contextmanager
def calling(
    name: str, callback: Callable[[str, str], object], *, match: str = "", times: int = -1
) -> Iterator[None]:
    """While the block runs, call ``callback(name, key)`` at point ``name`` in this process (for keys
    containing ``match``, at most ``times`` times): a test's way to act inside a window, such as
    condemning a run between a call's checks and its claim. Raises FaultsNotEnabledError where the
    harness did not ``enable`` faults, as ``configure`` does."""
    global _armed
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}: one of {', '.join(POINTS)}")
    if not _enabled:
        raise FaultsNotEnabledError(
            "fault injection is not enabled in this process: only the test harness arms fault points "
            "(saga_worker.core.faults.enable())"
        )
    rule = Rule(name, "call", 0.0, match, times, callback=callback)
    _rules.append(rule)
    _armed = True
    try:
        yield
    finally:
        _rules[:] = [r for r in _rules if r is not rule]
        _armed = bool(_rules or _dir)


def point(name: str, key: str = "") -> None:
    """A place where a test may inject a fault. Free unless armed."""
    if not _armed:
        return
    _fire(name, key)


def _fire(name: str, key: str) -> None:
    for rule in _rules:
        if rule.applies(name, key):
            rule.fired += 1
            _act(rule, name, key)
    if _dir:
        for rule in _claim_dir_rules(name, key):
            _act(rule, name, key)


def _claim_dir_rules(name: str, key: str) -> list[Rule]:
    try:
        entries = sorted(os.listdir(_dir))
    except OSError:
        return []
    taken: list[Rule] = []
    for entry in entries:
        if ".fired-" in entry or entry == "fired.log" or entry.startswith("."):
            continue
        path = os.path.join(_dir, entry)
        try:
            with open(path, encoding="utf-8") as fh:
                rule = parse_rule(fh.read())
        except (OSError, ValueError):
            continue
        if not rule.applies(name, key):
            continue
        if not entry.startswith("always."):
            try:  # the rename is the cross-process "first one wins"
                os.rename(path, f"{path}.fired-{os.getpid()}")
            except OSError:
                continue
        taken.append(rule)
    return taken


def _log(rule: Rule, name: str, key: str) -> None:
    if not _dir:
        return
    line = f"{time.time():.6f} {os.getpid()} {name} {rule.action} {key}\n"
    try:
        fd = os.open(os.path.join(_dir, "fired.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _act(rule: Rule, name: str, key: str) -> None:
    _log(rule, name, key)
    if rule.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif rule.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif rule.action == "exit":
        os._exit(70)
    elif rule.action == "raise":
        raise InjectedFault(f"fault injected at {name} ({key})")
    elif rule.action == "crash":
        raise InjectedCrash(f"crash injected at {name} ({key})")
    elif rule.action == "sleep":
        time.sleep(rule.arg)
    elif rule.action == "call" and rule.callback is not None:
        rule.callback(name, key)
