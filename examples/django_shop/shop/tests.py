"""`manage.py test shop`: the journal follows Django to its test database, Celery runs eagerly, and
the runner (TEST_RUNNER) closes the journal's connections before the test database is dropped."""

import json

from django.test import TestCase
from proj.celery import app

from saga_worker.celery import compensate_run
from saga_worker.contrib.django import journal

from .models import Effect


class OrderTests(TestCase):
    def setUp(self) -> None:
        app.conf.task_always_eager = True

    def tearDown(self) -> None:
        app.conf.task_always_eager = False

    def test_an_order_placed_then_cancelled_is_undone_once_in_the_test_database(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(
                "/orders/", json.dumps({"order_id": "t-1", "amount": 12}), content_type="application/json"
            )
        self.assertEqual(response.status_code, 201)
        self.assertEqual(journal().get_run("shop-order-t-1").status.value, "finished")
        report = compensate_run.delay("shop-order-t-1").get()
        self.assertEqual([e["status"] for e in report["entries"]], ["compensated"] * 3)
        kinds = sorted(Effect.objects.filter(order_id="t-1").values_list("kind", flat=True))
        self.assertEqual(kinds, ["charge", "hold", "refund", "release", "release_hold", "reserve"])
