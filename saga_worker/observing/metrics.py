"""Prometheus metrics of unwinds, recorded where the work happens (engine, executor, sweeper).

Workers run Celery's prefork pool: each child counts in files under ``PROMETHEUS_MULTIPROC_DIR``
(set before prometheus_client is imported; ``saga-worker worker`` does it) and the main process
serves their sum (``serve_worker_metrics``). The console serves the same, plus the gauge of runs
that need a person, read from the journal at scrape time. Recording is a counter increment: cheap
enough for every step. It goes through ``inc`` and ``observe``, which never raise: a metric that cannot
be recorded (its multiprocess file cannot be written) is logged once, and the run or unwind that
counted it goes on (``observing.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .guard import failed

log = logging.getLogger(__name__)

UNWINDS_STARTED = Counter("saga_unwinds_started", "Unwinds begun: the tombstone written (dry runs excluded).")
UNWINDS_FINISHED = Counter(
    "saga_unwinds_finished",
    "Unwinds ended, by outcome: complete, halted-<status of the halting step>, or incomplete "
    "(an uncertain or skipped-over step left for the sweeper).",
    ["outcome"],
)
STEPS = Counter(
    "saga_compensation_steps", "Compensation steps decided, by status (dry runs excluded).", ["status"]
)
HOOK_SECONDS = Histogram(
    "saga_compensate_hook_seconds",
    "Duration of compensate hook calls, by tool and outcome (returned or raised).",
    ["tool", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
CLAIM_TAKEOVERS = Counter(
    "saga_claim_takeovers", "Compensation claims taken over from a holder whose lease had expired."
)
SWEEPER_REDRIVES = Counter("saga_sweeper_redrives", "Unwinds the beat sweeper re-drove.")
SWEEPER_FLAGGED = Counter("saga_sweeper_flagged", "Runs the sweeper gave up on and flagged for a person.")
UNWINDS_HALTED = Counter(
    "saga_unwinds_halted",
    "Unwinds halted at a step, by the step's tool and status (failed, busy, awaiting-approval).",
    ["tool", "status"],
)
HOOKS_FAILED = Counter(
    "saga_compensate_hooks_failed", "Compensate hooks that raised (or timed out), by tool.", ["tool"]
)
UNWINDS_NEEDING_ATTENTION = Counter(
    "saga_unwinds_flagged_attention",
    "Unwinds flagged for a person: the sweeper gave up, a step's workers were lost too often, tools missing.",
)


_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, kept: ``labels`` checks and joins its values on every call (~3 µs,
    twice per compensated step), and the child it returns is the same object each time. Children are
    fork-safe (in multiprocess mode their values notice a new pid and switch files)."""
    key = (id(metric), values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def inc(metric: Any, *values: str) -> None:
    """Count one on ``metric`` (its child for label ``values``); an error is logged once, never raised."""
    try:
        if values:  # the kept child, looked up here: ``labelled`` only the first time
            child = _children.get((id(metric), values))
            (labelled(metric, *values) if child is None else child).inc()
        else:
            metric.inc()
    except Exception:  # noqa: BLE001 - a count lost, not the unwind that counted it
        failed("recording a metric")


def observe(metric: Any, amount: float, *values: str) -> None:
    """Observe ``amount`` on histogram ``metric`` for label ``values``; an error is logged once, never raised."""
    try:
        child = _children.get((id(metric), values))  # as ``inc``
        (labelled(metric, *values) if child is None else child).observe(amount)
    except Exception:  # noqa: BLE001 - as ``inc``
        failed("recording a metric")


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def registry() -> CollectorRegistry:
    """What a scrape reads: every process's counts when they share a multiprocess folder, else this
    process's own."""
    folder = multiprocess_dir()
    if folder is None:
        from prometheus_client import REGISTRY

        return REGISTRY
    from prometheus_client import multiprocess

    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged, path=folder)  # type: ignore[no-untyped-call]
    return merged


class AttentionCollector(Collector):
    """Read at scrape time from ``read()`` (the inbox): ``saga_runs_needing_attention{kind=…}``, runs
    waiting for a person by what they wait for (``suspended``, ``gated``, ``attention``,
    ``uncertain``: the inbox's kinds, its ``runs``); ``saga_unwinds_stuck``, the stuck lane's unwinds;
    ``saga_oldest_stuck_unwind_seconds``, how long since the oldest of them last moved."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "saga_runs_needing_attention",
            "Runs waiting for a person, by kind: a suspended call, a gated compensation, an unwind the "
            "sweeper gave up on (attention), a call whose outcome was never recorded (uncertain).",
            labels=["kind"],
        )
        stuck = GaugeMetricFamily(
            "saga_unwinds_stuck",
            "Unwinds neither complete nor waiting for a decision: halted at a failed or busy step, holding "
            "an uncertain one, unfinished, or queued and not started (the inbox's stuck lane).",
        )
        oldest = GaugeMetricFamily(
            "saga_oldest_stuck_unwind_seconds",
            "Seconds since the oldest stuck unwind last moved (0 when none is stuck).",
        )
        try:
            found = self._read()
            for kind, runs in found["runs"].items():
                gauge.add_metric([kind], float(runs))
            stuck.add_metric([], float(found["stuck"]["count"]))
            oldest.add_metric([], float(found["stuck"]["oldest_s"] or 0.0))
        except Exception:  # a journal that cannot be read must not break the scrape of the rest
            log.warning("cannot count the runs needing attention", exc_info=True)
            return
        yield gauge
        yield stuck
        yield oldest


def serve_worker_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Serve the workers' metrics over HTTP from the worker's main process (a daemon thread)."""
    if multiprocess_dir() is None:
        log.warning(
            "PROMETHEUS_MULTIPROC_DIR is not set: a prefork pool's children count where this process "
            "cannot see (start workers with `saga-worker worker`, which sets it)"
        )
    start_http_server(port, addr=host, registry=registry())
    log.info("metrics on http://%s:%d/metrics", host, port)


def process_exited(pid: int) -> None:
    """A pool child exited: its live gauges (none yet) stop counting; its counters stay in the sum."""
    if multiprocess_dir() is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
