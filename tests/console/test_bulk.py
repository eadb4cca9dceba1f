"""The console's bulk actions on a filtered runs list: a review that says how many, an action only
after a confirmation naming that count, operators only, CSRF as every other form."""

from __future__ import annotations

import re
import uuid

from starlette.testclient import TestClient

from tests.console.clients import BASE, Sent, csrf_of, place
from tests.ledger import MemoryLedger

from .conftest import Tokens


def log_in(client: TestClient, token: str) -> None:
    found = re.search(r'name="csrf" value="([^"]*)"', client.get("/login").text)
    form = {"token": token, **({"csrf": found.group(1)} if found else {})}
    assert client.post("/login", data=form, follow_redirects=False).status_code == 303


def test_compensate_in_bulk_reviews_the_count_then_acts_once_on_each_run(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    batch = f"bad-{uuid.uuid4().hex[:6]}"
    runs = sorted(place(app, ledger, prefix=batch) for _ in range(3))
    place(app, ledger, prefix="good")
    log_in(app, tokens.operator)
    page = app.get(f"/?search={batch}").text
    assert 'id="bulk"' in page
    csrf = csrf_of(page)
    same = {"Origin": BASE}
    review = app.post("/bulk", data={"csrf": csrf, "action": "compensate", "search": batch}, headers=same)
    assert review.status_code == 200 and '<span id="bulk-count">3</span>' in review.text
    assert sorted(re.findall(rf'href="/runs/({batch}-[0-9a-f]+)"', review.text)) == runs
    assert sent.calls == [], "a review does nothing"

    form = {"csrf": csrf, "action": "compensate", "search": batch, "reason": "bad deploy"}
    moved = app.post("/bulk/confirm", data={**form, "count": "2"}, headers=same)
    assert "the selection changed since you reviewed it: 3 runs now, not 2" in moved.text and sent.calls == []

    done = app.post("/bulk/confirm", data={**form, "count": "3"}, headers=same)
    assert done.status_code == 200 and "3 done, 0 skipped" in done.text
    assert sorted(r for r, _ in sent.calls) == runs
    assert {a["reason"] for a in sent.audit} == {"bad deploy"}
    again = app.post("/bulk/confirm", data={**form, "count": "0"}, headers=same)
    assert "0 done, 0 skipped" in again.text  # planned again: none left to queue
    assert len(sent.calls) == 3, "each run queued once"
    assert app.post("/bulk", data={"action": "compensate", "search": batch}, headers=same).status_code == 403


def test_a_viewer_has_no_bulk_panel_and_cannot_post_one(app: TestClient, tokens: Tokens, sent: Sent) -> None:
    log_in(app, tokens.viewer)
    page = app.get("/").text
    assert 'id="bulk"' not in page
    form = {"csrf": csrf_of(page), "action": "compensate", "search": "x"}
    assert app.post("/bulk", data=form, headers={"Origin": BASE}).status_code == 403
    assert sent.calls == []
