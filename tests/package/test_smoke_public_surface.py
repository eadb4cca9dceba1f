"""The names docs/reference/ promises are importable from the package root."""

import saga_worker


def test_public_surface_exports_every_contract_name() -> None:
    for name in [
        "Tool",
        "CallOptions",
        "RecoverResult",
        "ToolCall",
        "Finish",
        "scripted",
        "run_durable",
        "stream_durable",
        "resume_run",
        "fork_run",
        "open_journal",
        "MemoryJournal",
        "SqlJournal",
        "compensate_run",
        "CompensationReport",
        "CompensationEntry",
        "CompensationStatus",
        "run_compensated",
        "assert_not_compensated",
        "CompensatedRunError",
        "SideEffectRetryBlockedError",
        "RunResult",
        "SagaError",
        "approve",
        "deny",
        "approve_compensation",
        "deny_compensation",
        "read_audit",
    ]:
        assert getattr(saga_worker, name) is not None, name


def test_compensation_statuses_are_exactly_the_eleven_of_the_contract() -> None:
    assert {s.value for s in saga_worker.CompensationStatus} == {
        "compensated",
        "already-compensated",
        "would-compensate",
        "skipped-no-hook",
        "skipped-not-executed",
        "uncertain",
        "busy",
        "failed",
        "not-attempted",
        "awaiting-approval",
        "skipped-denied",
    }
