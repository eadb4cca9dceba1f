"""An unwind asked for inside the app's transaction that the journal joins (issue 50): its tombstone
and its compensations' claims must commit on their own, never with the app's transaction (a
tombstone rolled back would let the run resume after its refunds; a claim rolled back would lose the
record of a compensation done). So the unwind is refused before anything is written, whichever run
it is for (the one whose in_transaction call joined, another), through the library's
``compensate_run`` or ``actions.unwind_here``; once the app's transaction has committed, the same
unwind goes through. Each case is read back from the database after the app's transaction ends."""

import uuid

from django.db import transaction
from django.test import TransactionTestCase

from saga_worker import CompensationStatus, OpenTransactionError, compensate_run, executor, saga
from saga_worker.actions import unwind_here
from saga_worker.contrib.django import journal, tools
from saga_worker.errors import UnwindInTransactionError
from saga_worker.journal.records import ClaimStatus

from . import tools as order_tools
from .payments import Rollback, paid, pay, records, run_status


def condemned(run_id: str) -> bool:
    run = journal().get_run(run_id)
    return run is not None and run.condemned


def claims(run_id: str) -> list[str]:
    """The statuses of the compensation claims of the run's steps, as the journal's own connection
    reads them (committed)."""
    keys = [(run_id, r.suffix) for r in journal().list_records(run_id)]
    return [c.status.value for c in journal().get_claims(keys).values()]


def charge(run_id: str) -> None:
    """A run of one call whose effect is outside the database (``pay``: its compensation notes itself)."""
    with saga(run_id, journal=journal(), tools=tools()) as run:
        run.call("pay", {"amount": 20})


def on_sqlite() -> bool:
    return bool(transaction.get_connection().vendor == "sqlite")


# Not a TestCase: its own per-test transaction would be the one the calls join, and roll back.
class UnwindInTransactionTests(TransactionTestCase):  # type: ignore[misc]
    def setUp(self) -> None:
        self.run = f"ormundo-{uuid.uuid4().hex[:8]}"
        order_tools.UNDONE.clear()

    def test_compensating_the_run_that_joined_is_refused_in_its_block_and_goes_through_after_it(self) -> None:
        with self.assertRaises(Rollback), transaction.atomic():
            pay(self.run, 30)
            with self.assertRaises(UnwindInTransactionError) as refused:
                compensate_run(self.run, journal=journal(), tools=tools())
            raise Rollback
        self.assertIsInstance(refused.exception, OpenTransactionError)
        self.assertIn("on_commit", str(refused.exception))
        # Rolled back: the payment, its record and the run; no compensation ran, none was claimed.
        self.assertEqual((paid(self.run), records(self.run), run_status(self.run)), ([], [], None))
        self.assertEqual((condemned(self.run), claims(self.run), order_tools.UNDONE), (False, [], []))

        with transaction.atomic():
            pay(self.run, 30)
            with self.assertRaises(UnwindInTransactionError):
                compensate_run(self.run, journal=journal(), tools=tools())
        # Committed: the payment and its record, the run not condemned, nothing claimed or undone.
        self.assertEqual((paid(self.run), condemned(self.run)), ([30], False))
        self.assertEqual((claims(self.run), order_tools.UNDONE), ([], []))
        # Once the app's transaction has committed, the unwind goes through on its own.
        report = compensate_run(self.run, journal=journal(), tools=tools())
        self.assertEqual([e.status for e in report.entries], [CompensationStatus.COMPENSATED])
        self.assertEqual((paid(self.run), condemned(self.run)), ([], True))
        self.assertEqual(
            (claims(self.run), order_tools.UNDONE), ([ClaimStatus.COMPENSATED.value], ["pay_in_db"])
        )

    def test_unwinding_another_run_after_a_call_joined_is_refused_and_its_run_is_untouched(self) -> None:
        other = f"{self.run}-other"
        charge(other)
        context = executor.current()
        context.journal  # noqa: B018 - opened before the block: opening writes the file (one writer)
        with self.assertRaises(Rollback), transaction.atomic():
            pay(self.run, 30)
            with self.assertRaises(UnwindInTransactionError):
                compensate_run(other, journal=journal(), tools=tools())
            with self.assertRaises(UnwindInTransactionError):
                unwind_here(other, context=context, actor="tester", reason="cancelled", via="library")
            raise Rollback
        self.assertEqual((condemned(other), claims(other), order_tools.UNDONE), (False, [], []))
        self.assertEqual(journal().read_audit(other), [])
        report = unwind_here(other, context=context, actor="tester", reason="cancelled", via="library")
        self.assertEqual([e.status for e in report.entries], [CompensationStatus.COMPENSATED])
        self.assertEqual(
            (condemned(other), claims(other), order_tools.UNDONE), (True, ["compensated"], ["pay"])
        )

    def test_an_unwind_in_an_app_transaction_the_journal_has_not_joined_commits_on_its_own_or_is_refused(
        self,
    ) -> None:
        other = f"{self.run}-other"
        charge(other)
        outcome = "refused"
        with self.assertRaises(Rollback), transaction.atomic():
            paid(self.run)  # the app reads; on SQLite the journal would join its transaction
            try:
                compensate_run(other, journal=journal(), tools=tools())
                outcome = "unwound"
            except UnwindInTransactionError:
                pass
            raise Rollback
        if on_sqlite():
            # One writer: the journal joins any transaction of the app's on its file, so it refuses.
            self.assertEqual(outcome, "refused")
            self.assertEqual((condemned(other), claims(other), order_tools.UNDONE), (False, [], []))
        else:
            # PostgreSQL, nothing joined: the tombstone and the claim committed on the journal's own
            # connection before the hook ran, and outlive the app's rollback.
            self.assertEqual(outcome, "unwound")
            self.assertEqual(
                (condemned(other), claims(other), order_tools.UNDONE), (True, ["compensated"], ["pay"])
            )
