"""A Tool(in_transaction=True) call made inside the app's transaction on SAGA_DATABASE (issue 50):
its ORM effect (a ``Payment``) and its record commit together, or roll back together, read back from
the database after each case: atomic() committed and rolled back, a savepoint (nested atomic)
rolled back alone, on_commit, autocommit off, a second database's transaction (refused), the tool
raising, and SQLite's single writer (the app's write transaction open while the journal writes)."""

import uuid
from typing import Any

from django.db import transaction
from django.test import TransactionTestCase

from saga_worker import OpenTransactionError, ToolFailedError, open_journal, saga
from saga_worker.contrib.django import journal, tools
from saga_worker.journal.records import RecordStatus, RunStatus

from .models import Payment
from .payments import Rollback, paid, pay, records, run_status


# Not a TestCase: its own per-test transaction would be the one the calls join, and roll back.
class InTransactionTests(TransactionTestCase):  # type: ignore[misc]
    databases = {"default", "other"}

    def setUp(self) -> None:
        self.run = f"ormpay-{uuid.uuid4().hex[:8]}"

    def test_committed_atomic_block_commits_the_payment_with_its_record_and_the_run(self) -> None:
        with transaction.atomic():
            out = pay(self.run, 30)
        self.assertEqual(paid(self.run), [30])
        self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.SUCCEEDED.value, False)])
        self.assertEqual(out, {"payment": Payment.objects.get().pk})
        self.assertEqual(run_status(self.run), RunStatus.FINISHED.value)

    def test_rolled_back_atomic_block_leaves_neither_payment_nor_record_nor_run(self) -> None:
        with self.assertRaises(Rollback), transaction.atomic():
            pay(self.run, 30)
            raise Rollback
        self.assertEqual(paid(self.run), [])
        self.assertEqual(records(self.run), [])
        self.assertIsNone(run_status(self.run))
        # Nothing recorded, nothing done: the same call made again pays, once.
        with transaction.atomic():
            pay(self.run, 30)
        self.assertEqual(paid(self.run), [30])
        self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.SUCCEEDED.value, False)])

    def test_a_savepoint_rolled_back_takes_its_call_with_it_and_the_outer_block_commits_the_rest(
        self,
    ) -> None:
        kept, dropped = f"{self.run}-kept", f"{self.run}-dropped"
        with transaction.atomic():
            pay(kept, 10)
            with self.assertRaises(Rollback), transaction.atomic():
                pay(dropped, 20)
                raise Rollback
        self.assertEqual((paid(kept), paid(dropped)), ([10], []))
        self.assertEqual(records(kept), [("pay_in_db", RecordStatus.SUCCEEDED.value, False)])
        self.assertEqual((records(dropped), run_status(dropped)), ([], None))

    def test_on_commit_sees_the_payment_and_its_record_committed(self) -> None:
        seen: list[Any] = []
        with transaction.atomic():
            pay(self.run, 30)
            # Read inside it, through the transaction the journal joined: its own writes.
            self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.SUCCEEDED.value, False)])
            transaction.on_commit(lambda: seen.append((records(self.run), paid(self.run))))
        self.assertEqual(seen, [([("pay_in_db", RecordStatus.SUCCEEDED.value, False)], [30])])

    def test_autocommit_off_commits_or_rolls_back_both_with_the_app(self) -> None:
        transaction.set_autocommit(False)
        try:
            pay(self.run, 30)
            transaction.rollback()
            self.assertEqual((paid(self.run), records(self.run)), ([], []))
            pay(self.run, 40)
            transaction.commit()
        finally:
            transaction.set_autocommit(True)
        self.assertEqual(paid(self.run), [40])
        self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.SUCCEEDED.value, False)])

    def test_a_transaction_of_another_database_is_refused_and_nothing_is_written(self) -> None:
        with self.assertRaises(OpenTransactionError) as refused, transaction.atomic(using="other"):
            pay(self.run, 30)
        self.assertIn("'other'", str(refused.exception))
        with (
            self.assertRaises(OpenTransactionError),
            transaction.atomic(),
            transaction.atomic(using="other"),
        ):
            pay(self.run, 30)
        self.assertEqual((paid(self.run), records(self.run), run_status(self.run)), ([], [], None))

    def test_a_journal_elsewhere_cannot_join_and_its_call_is_refused(self) -> None:
        elsewhere = open_journal("memory://")
        with (
            self.assertRaises(OpenTransactionError),
            transaction.atomic(),
            saga(self.run, journal=elsewhere, tools=tools()) as run,
        ):
            run.call("pay_in_db", {"amount": 30})
        self.assertEqual((paid(self.run), elsewhere.list_records(self.run)), ([], []))

    def test_a_tool_that_raises_leaves_no_payment_and_a_record_of_no_effect(self) -> None:
        with transaction.atomic(), self.assertRaises(ToolFailedError):
            pay(self.run, 30, fail=True)
        self.assertEqual(paid(self.run), [])
        self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.FAILED.value, True)])
        self.assertEqual(run_status(self.run), RunStatus.FAILED.value)
        # And when the app's block rolls back as the error leaves it: nothing at all.
        other = f"{self.run}-2"
        with self.assertRaises(ToolFailedError), transaction.atomic():
            pay(other, 30, fail=True)
        self.assertEqual((paid(other), records(other), run_status(other)), ([], [], None))

    def test_a_database_error_inside_the_tool_is_rolled_back_alone_and_the_app_s_transaction_goes_on(
        self,
    ) -> None:
        with transaction.atomic():
            with self.assertRaises(ToolFailedError) as failed:
                pay(self.run, 30, twice=True)
            Payment.objects.create(key=f"{self.run}-after", amount=5)  # the app's transaction still works
        self.assertIn("IntegrityError", failed.exception.error)
        self.assertEqual(paid(self.run), [5])
        self.assertEqual(records(self.run), [("pay_in_db", RecordStatus.FAILED.value, True)])

    def test_the_app_s_write_transaction_open_the_journal_writes_without_waiting_for_it(self) -> None:
        # The app writes first (on SQLite: it holds the file's one write lock), then a run with a
        # read-only call, the in_transaction call and the run's end: none waits on the app's lock.
        with transaction.atomic():
            Payment.objects.create(key=f"{self.run}-first", amount=1)
            with saga(self.run, journal=journal(), tools=tools()) as run:
                run.call("check_stock", {"sku": "A1"})
                run.call("pay_in_db", {"amount": 30})
        self.assertEqual(paid(self.run), [1, 30])
        self.assertEqual(
            sorted(records(self.run)),
            [
                ("check_stock", RecordStatus.SUCCEEDED.value, False),
                ("pay_in_db", RecordStatus.SUCCEEDED.value, False),
            ],
        )
        self.assertEqual(run_status(self.run), RunStatus.FINISHED.value)

    def test_after_the_joined_transaction_ends_other_journal_work_is_on_the_journal_s_own_again(self) -> None:
        # One atomic object used twice, as a view decorated with @transaction.atomic uses its own.
        block = transaction.atomic()
        with block:
            pay(self.run, 30)
        other = f"{self.run}-read"
        with self.assertRaises(Rollback), block:
            with saga(other, journal=journal(), tools=tools()) as run:
                run.call("check_stock", {"sku": "A1"})
            raise Rollback
        if transaction.get_connection().vendor == "sqlite":
            # One writer: the journal joins every transaction of the app's on its file.
            self.assertEqual((records(other), run_status(other)), ([], None))
        else:
            # A read-only call's record, on the journal's own connection, outlives the app's rollback.
            self.assertEqual(records(other), [("check_stock", RecordStatus.SUCCEEDED.value, False)])
            self.assertEqual(run_status(other), RunStatus.FINISHED.value)
        self.assertEqual(paid(self.run), [30])
