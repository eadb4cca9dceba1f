"""examples/shop end to end: its own Celery app (in its own package named ``config``), two real
workers and the FastAPI server started from the example's folder on Redis + PostgreSQL, driven over
HTTP: an order placed through a chain of forward tasks, then cancelled with ``compensate_run.delay``;
an order that fails at its second step, cancelled too. The shop's database is the witness."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

from .conftest import READY_TIMEOUT_S, redis_db, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"
TIMEOUT = 60.0


class Shop:
    def __init__(self, base: str) -> None:
        self.base = base

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT + 10) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def order(self, order_id: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/orders/{order_id}")
        assert status == 200, body
        return dict(body)

    def wait(self, order_id: str, what: str, predicate: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def check() -> bool:
            status, body = self.request("GET", f"/orders/{order_id}")
            seen.update(body if status == 200 else {})
            return status == 200 and bool(predicate(body))

        wait_for(check, TIMEOUT, f"{what} (last seen: {seen})")
        return seen


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> Iterator[Shop]:
    require("redis")
    tmp = tmp_path_factory.mktemp("shop")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    tag = uuid.uuid4().hex[:8]
    # The example's own folder is the only one on its path: its `config` is the shop's, not a checkout's.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "SHOP_", "PYTHONPATH"))}
    env.update(
        SHOP_BROKER_URL=url,
        SHOP_DATABASE_URL=pg_database_url,
        SHOP_QUEUE=f"shop-{tag}",
        SAGA_JOURNAL_URL=pg_database_url,
        SAGA_REDIS_URL=url,
        SAGA_QUEUE=f"saga-{tag}",
        SAGA_HOME=str(tmp / "home"),
    )
    queues = f"shop-{tag},saga-{tag}"
    workers = [
        WorkerProcess(
            ["celery", "-A", "config", "worker", "-Q", queues],
            env,
            tmp / f"worker-{n}.log",
            concurrency=1,
            beat=False,
            name=f"shop{n}-",
            cwd=SHOP,
        )
        for n in (1, 2)
    ]
    port = _free_port()
    log = open(tmp / "web.log", "ab")  # noqa: SIM115 - closed below
    web = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "shop.web:api", "--host", "127.0.0.1", "--port", str(port)],
        cwd=SHOP,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = Shop(f"http://127.0.0.1:{port}")
    try:
        for worker in workers:
            wait_for(worker.ready, READY_TIMEOUT_S, f"a shop worker to be ready:\n{worker.tail()}")

        def up() -> bool:
            assert web.poll() is None, (tmp / "web.log").read_text()
            try:
                return client.request("GET", "/orders/none")[0] == 404
            except OSError:
                return False

        wait_for(up, READY_TIMEOUT_S, "the shop's web server")
        yield client
    finally:
        web.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            web.wait(timeout=10)
        web.kill()
        log.close()
        for worker in workers:
            worker.stop()


def test_an_order_placed_over_http_is_charged_reserved_and_confirmed_by_the_chain_then_cancelled(
    shop: Shop,
) -> None:
    sku = f"mug-{uuid.uuid4().hex[:6]}"
    assert shop.request("POST", f"/stock/{sku}?qty=5")[0] == 204
    status, placed = shop.request("POST", "/orders", {"sku": sku, "qty": 2, "amount": 4200, "email": "a@b.c"})
    assert status == 202
    order_id = placed["order_id"]
    order = shop.wait(order_id, "the order to be placed", lambda o: o["status"] == "finished")
    assert [(s["tool"], s["status"]) for s in order["steps"]] == [
        ("charge", "succeeded"),
        ("reserve", "succeeded"),
        ("confirm", "succeeded"),
    ]
    assert order["payments"] == [{"amount": 4200, "refunded": False}]
    assert order["reservations"] == [{"sku": sku, "qty": 2, "released": False}]
    assert order["stock_left"] == {sku: 3}
    assert order["emails"] == [f"Order {order_id} confirmed"]

    status, cancelled = shop.request("POST", f"/orders/{order_id}/cancel?wait=true")
    assert status == 202
    assert [(e["tool_name"], e["status"]) for e in cancelled["report"]["entries"]] == [
        ("confirm", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]
    order = shop.order(order_id)
    assert order["cancelled"] is True and order["unwind"] == "complete"
    assert order["payments"] == [{"amount": 4200, "refunded": True}]
    assert order["reservations"] == [{"sku": sku, "qty": 2, "released": True}]
    assert order["stock_left"] == {sku: 5}
    assert order["emails"] == [f"Order {order_id} confirmed", f"Order {order_id} cancelled"]

    # Cancelling again changes nothing: every step reads already-compensated.
    again = shop.request("POST", f"/orders/{order_id}/cancel?wait=true")[1]
    assert {e["status"] for e in again["report"]["entries"]} == {"already-compensated"}
    assert shop.order(order_id)["stock_left"] == {sku: 5}


def test_an_order_that_fails_at_its_second_step_stops_the_chain_and_its_cancel_refunds_the_charge(
    shop: Shop,
) -> None:
    sku = f"rare-{uuid.uuid4().hex[:6]}"
    assert shop.request("POST", f"/stock/{sku}?qty=1")[0] == 204
    order_id = shop.request("POST", "/orders", {"sku": sku, "qty": 3, "amount": 999, "email": "a@b.c"})[1][
        "order_id"
    ]
    order = shop.wait(order_id, "the order to fail", lambda o: o["status"] == "failed")
    assert "OutOfStock" in order["error"]
    assert [(s["tool"], s["status"]) for s in order["steps"]] == [
        ("charge", "succeeded"),
        ("reserve", "failed"),
    ]
    assert order["emails"] == []  # the chain stopped: no confirmation was sent
    status, cancelled = shop.request("POST", f"/orders/{order_id}/cancel")
    assert status == 202 and cancelled["task_id"]
    order = shop.wait(order_id, "the cancel to complete", lambda o: o["unwind"] == "complete")
    assert order["payments"] == [{"amount": 999, "refunded": True}]
    assert order["reservations"] == []


def test_unknown_orders_are_404_and_bad_orders_are_422(shop: Shop) -> None:
    assert shop.request("GET", "/orders/order-nope")[0] == 404
    assert shop.request("POST", "/orders/order-nope/cancel")[0] == 404
    assert shop.request("POST", "/orders", {"sku": "x", "qty": 0, "amount": 1, "email": "a@b.c"})[0] == 422
