"""Forward steps as the shop's own Celery tasks: each records its call into the order's run."""

from celery import shared_task

from saga_worker.celery import record_call


def run_id(order_id: str) -> str:
    # Prefixed with the app's name: run ids are one namespace across everything sharing the journal.
    return f"shop-order-{order_id}"


@shared_task(name="shop.charge")
def charge(order_id: str, amount: int) -> dict:
    return record_call(run_id(order_id), "charge", {"order_id": order_id, "amount": amount}, id="charge")


@shared_task(name="shop.reserve")
def reserve(order_id: str) -> dict:
    # The chain's last step finishes the run.
    return record_call(run_id(order_id), "reserve", {"order_id": order_id}, id="reserve", finish=True)
