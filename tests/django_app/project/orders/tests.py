"""The Django admin's saga-worker pages, driven by Django's test client (issue 50): the runs listed,
filtered and searched; a run's calls, unwinds and audit trail; each action (compensate after a dry
run, re-drive, approve or deny a call or a gated compensation) with the user as the audit trail's
actor; and a user without the permission refused. Celery runs eagerly, the journal is the test
database's."""

import re
import time
import uuid
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import TransactionTestCase

from saga_worker import ToolCall, run_durable, scripted
from saga_worker.celery.install import installed_app
from saga_worker.contrib.django import journal, tools
from saga_worker.journal.records import NewRecord, RunInfo, UnwindState

from . import tools as order_tools

RUNS = "/admin/saga_worker/run/"


def staff(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="-", is_staff=True)
    found = Permission.objects.filter(content_type__app_label="saga_worker", codename__in=codenames)
    assert found.count() == len(codenames), list(found)
    user.user_permissions.set(found)
    return user


def listed(html: str) -> set[str]:
    """The run ids in the listing's rows."""
    return set(re.findall(r'<tr class="run-row">\s*<th><a href="[^"]+">([^<]+)</a>', html))


def condemned(run_id: str) -> bool:
    run: RunInfo | None = journal().get_run(run_id)
    assert run is not None, run_id
    return run.condemned


def audit(run_id: str) -> list[tuple[str, str, str]]:
    return [(r.action.value, r.actor, r.reason) for r in journal().read_audit(run_id)]


# Not a TestCase: its per-test transaction on the SQLite file would hold the write lock the journal's
# own connection needs. Journal rows outlive each test; every test names its runs afresh.
class AdminTests(TransactionTestCase):  # type: ignore[misc]
    def setUp(self) -> None:
        app = installed_app()  # proj.celery's, which install() was given
        assert app is not None
        self.app = app
        app.conf.task_always_eager = True
        tag = uuid.uuid4().hex[:8]
        self.placed, self.waiting = f"ord-{tag}-placed", f"ord-{tag}-waiting"
        order = scripted(ToolCall("pay", {"amount": 30}), ToolCall("reserve", {"sku": "A1"}), final="ok")
        run_durable(self.placed, journal=journal(), tools=tools(), planner=order)
        run_durable(self.waiting, journal=journal(), tools=tools(), planner=scripted(ToolCall("refund", {})))
        self.viewer = staff(f"viewer-{tag}", "view_run")
        self.operator = staff(f"operator-{tag}", "view_run", "compensate_run", "decide")
        self.stranger = staff(f"stranger-{tag}")
        order_tools.UNDONE.clear()

    def tearDown(self) -> None:
        self.app.conf.task_always_eager = False

    def page(self, user: User, url: str, **query: str) -> str:
        self.client.force_login(user)
        response = self.client.get(url, query)
        self.assertEqual(response.status_code, 200, response.content[:2000])
        return str(response.content.decode())

    def post(self, user: User, action: str, run_id: str, **form: str) -> Any:
        self.client.force_login(user)
        return self.client.post(f"{RUNS}{run_id}/{action}/", form, follow=True)

    def test_the_runs_are_listed_filtered_by_status_unwind_state_and_need_of_a_person_and_searched_by_id(
        self,
    ) -> None:
        both = {self.placed, self.waiting}
        self.assertLessEqual(both, listed(self.page(self.viewer, RUNS)))
        prefix = self.placed.rsplit("-", 1)[0]  # both runs' ids share it
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix)), both)
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=self.placed)), {self.placed})
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix, status="suspended")), {self.waiting})
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix, status="finished")), {self.placed})
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix, person="yes")), {self.waiting})
        self.assertEqual(
            listed(self.page(self.viewer, RUNS, q=prefix, person="yes", status="suspended")), {self.waiting}
        )
        self.assertEqual(
            listed(self.page(self.viewer, RUNS, q=prefix, person="yes", status="finished")), set()
        )
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix, unwind="none")), both)
        self.assertEqual(listed(self.page(self.viewer, RUNS, q=prefix, unwind="complete")), set())
        self.assertIn("No runs match.", self.page(self.viewer, RUNS, q="no-such-run-anywhere"))

    def test_a_run_whose_process_died_mid_call_is_listed_interrupted_not_running(self) -> None:
        crashed = f"crashed-{uuid.uuid4().hex[:8]}"
        journal().start_run(crashed, "ship it")
        new = NewRecord("call-1", 0, "call-1", "pay", "call", {"amount": 5}, crashed)
        journal().claim_record(crashed, new, gated=True, owner="dead-worker", ttl=0.001)  # its lease runs out
        time.sleep(0.05)
        row = re.search(
            rf'<a href="[^"]+">{crashed}</a>.*?<td class="status">([^<]+)</td>',
            self.page(self.viewer, RUNS),
            re.S,
        )
        self.assertIsNotNone(row)
        assert row is not None
        self.assertEqual(row.group(1).strip(), "interrupted")

    def test_a_run_page_shows_its_calls_and_what_waits_for_a_person(self) -> None:
        page = self.page(self.viewer, f"{RUNS}{self.placed}/")
        self.assertIn("pay", page)
        self.assertIn("reserve", page)
        self.assertIn("None on the workers", page)
        waiting = self.page(self.viewer, f"{RUNS}{self.waiting}/")
        self.assertIn("a suspended call", waiting)
        self.assertIn("a person with saga_worker.decide can decide", waiting)  # a viewer sees no form

    def test_a_staff_user_without_view_run_is_refused_every_page_and_action(self) -> None:
        self.client.force_login(self.stranger)
        self.assertEqual(self.client.get(RUNS).status_code, 403)
        self.assertEqual(self.client.get(f"{RUNS}{self.placed}/").status_code, 403)
        self.assertEqual(
            self.post(self.stranger, "compensate", self.placed, confirm="1", reason="r").status_code, 403
        )

    def test_a_viewer_cannot_compensate_redrive_or_decide_and_nothing_is_written(self) -> None:
        refused = [
            self.post(self.viewer, "compensate", self.placed, confirm="1", reason="no").status_code,
            self.post(self.viewer, "redrive", self.placed).status_code,
            self.post(
                self.viewer, "decide", self.waiting, decision="approve", target="call-1", reason="no"
            ).status_code,
        ]
        self.assertEqual(refused, [403, 403, 403])
        self.assertFalse(condemned(self.placed))
        self.assertEqual(audit(self.placed) + audit(self.waiting), [])

    def test_compensate_shows_a_dry_run_first_then_unwinds_with_the_user_and_reason_in_the_audit_trail(
        self,
    ) -> None:
        plan = self.post(self.operator, "compensate", self.placed)
        self.assertContains(plan, "Dry run: what an unwind would do now")
        self.assertContains(plan, "would-compensate")
        self.assertFalse(condemned(self.placed))  # the dry run wrote nothing
        done = self.post(self.operator, "compensate", self.placed, confirm="1", reason="customer cancelled")
        self.assertContains(done, "queued as task")
        self.assertTrue(condemned(self.placed))
        # reserve's compensation waits for a person; pay is not attempted past it.
        self.assertContains(done, "a gated compensation")
        self.assertContains(done, "halted-awaiting-approval")  # the workers' unwind, step by step
        trail = audit(self.placed)
        self.assertIn(("unwind-queued", self.operator.username, "customer cancelled"), trail)
        self.assertIn(("condemned", self.operator.username, "customer cancelled"), trail)
        # A compensation needs a reason: an empty one is refused, and shown.
        refused = self.post(self.operator, "compensate", self.waiting, confirm="1", reason="  ")
        self.assertContains(refused, "A reason is required")

    def test_a_gated_compensation_and_a_suspended_call_are_decided_with_a_reason_by_the_user(self) -> None:
        self.post(self.operator, "compensate", self.placed, confirm="1", reason="cancel")
        (gate,) = [s for s in journal().list_records(self.placed) if s.tool_name == "reserve"]
        approved = self.post(
            self.operator,
            "decide",
            self.placed,
            decision="approve-compensation",
            target=gate.suffix,
            reason="ok",
        )
        self.assertContains(approved, "recorded")
        self.assertIn(("compensation-approved", self.operator.username, "ok"), audit(self.placed))
        (call,) = journal().list_records(self.waiting)
        denied = self.post(
            self.operator,
            "decide",
            self.waiting,
            decision="deny",
            target=call.tool_call_id,
            reason="too much",
        )
        self.assertContains(denied, "recorded")
        self.assertIn(("denied", self.operator.username, "too much"), audit(self.waiting))

    def test_redrive_of_a_run_flagged_for_attention_hands_it_back_with_the_user_s_reason(self) -> None:
        self.post(self.operator, "compensate", self.placed, confirm="1", reason="cancel")
        journal().set_unwind_state(self.placed, UnwindState.ATTENTION, note="gave up after 8 re-drives")
        self.assertIn('id="redrive-reason"', self.page(self.operator, f"{RUNS}{self.placed}/"))
        done = self.post(self.operator, "redrive", self.placed, reason="provider is back")
        self.assertContains(done, "re-driven as task")
        self.assertIn(("unwound", self.operator.username, "provider is back"), audit(self.placed))
        self.assertNotEqual(journal().get_run(self.placed).unwind_state, UnwindState.ATTENTION)  # type: ignore[union-attr]

    def test_redrive_of_a_run_not_flagged_for_attention_is_refused_and_says_why(self) -> None:
        refused = self.post(self.operator, "redrive", self.placed)
        self.assertContains(refused, "not flagged for attention")
        self.assertEqual(audit(self.placed), [])

    def test_under_atomic_requests_compensate_still_unwinds_outside_the_request_s_transaction(self) -> None:
        # ATOMIC_REQUESTS wraps a view in the request's transaction, which on SQLite the journal would
        # join, and refuse the (eager) unwind in: the admin's actions run outside it.
        settings = connections["default"].settings_dict
        settings["ATOMIC_REQUESTS"] = True
        try:
            done = self.post(self.operator, "compensate", self.placed, confirm="1", reason="cancel")
        finally:
            settings["ATOMIC_REQUESTS"] = False
        self.assertContains(done, "queued as task")
        self.assertContains(done, "halted-awaiting-approval")  # the workers' unwind ran, to reserve's gate
        self.assertTrue(condemned(self.placed))
        self.assertIn(("condemned", self.operator.username, "cancel"), audit(self.placed))

    def test_an_action_is_a_post_only(self) -> None:
        self.client.force_login(self.operator)
        self.assertEqual(self.client.get(f"{RUNS}{self.placed}/compensate/").status_code, 405)
