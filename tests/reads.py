"""What a test expects to be journaled, read back: the record, or a failed assertion naming what is missing."""

from __future__ import annotations

from saga_worker import Journal
from saga_worker.journal.records import CompensationClaim, RunInfo, SharedAction, ToolRecord


def run_of(journal: Journal, run_id: str) -> RunInfo:
    run = journal.get_run(run_id)
    assert run is not None, f"no run {run_id!r}"
    return run


def record_of(journal: Journal, run_id: str, suffix: str) -> ToolRecord:
    record = journal.get_record(run_id, suffix)
    assert record is not None, f"no record {run_id!r} {suffix!r}"
    return record


def claim_of(journal: Journal, origin_run_id: str, suffix: str) -> CompensationClaim:
    claim = journal.get_claim(origin_run_id, suffix)
    assert claim is not None, f"no compensation claim {origin_run_id!r} {suffix!r}"
    return claim


def shared_of(journal: Journal, shared_id: str) -> SharedAction:
    shared = journal.get_shared(shared_id)
    assert shared is not None, f"no shared execution {shared_id!r}"
    return shared


def latest_shared_of(journal: Journal, key: str) -> SharedAction:
    shared = journal.latest_shared(key)
    assert shared is not None, f"no shared execution under {key!r}"
    return shared
