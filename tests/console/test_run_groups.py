"""The run page and its API show the groups a run recorded (docs/reference/compensation.md, "Groups"),
numbered as an unwind's report numbers them (issue 47)."""

from __future__ import annotations

from starlette.testclient import TestClient

from saga_worker import compensate_run, saga
from tests.console.clients import bearer, console_journal
from tests.ledger import MemoryLedger, order_tools

from .conftest import Tokens


def test_a_run_page_shows_each_step_of_a_recorded_group_with_the_number_its_report_gives(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, run_id: str
) -> None:
    journal, tools = console_journal(app), order_tools(ledger)
    with saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
        with run.parallel():
            run.call("reserve", {"sku": "A1"})
            run.call("notify", {"to": "ann"})

    steps = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()["steps"]
    shown = {s["tool_name"]: (s["group"], s["group_size"]) for s in steps}
    assert shown == {"charge": (1, 1), "reserve": (2, 2), "notify": (2, 2)}
    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)
    assert {e.tool_name: e.group for e in plan.entries} == {name: g for name, (g, _) in shown.items()}

    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer)).text
    assert (
        page.count(">group 2</span>") == 2 and ">group 1</span>" not in page
    )  # a group of one is not marked
