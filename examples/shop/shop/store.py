"""The shop's database: payments, stock and reservations, and the emails sent.

It stands in for the payment provider, the warehouse and the mailer, and behaves as good ones do:
every operation is keyed by the idempotency key it was given, and a repeat of a key returns the first
result instead of acting again. saga-worker hands the same key to a retried call, so nothing is
charged, reserved or refunded twice.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from config import settings

meta = sa.MetaData()
payments = sa.Table(
    "shop_payments",
    meta,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("order_id", sa.String(200), nullable=False),
    sa.Column("amount", sa.Integer, nullable=False),
    sa.Column("refunded_by", sa.String(300)),
)
stock = sa.Table(
    "shop_stock",
    meta,
    sa.Column("sku", sa.String(100), primary_key=True),
    sa.Column("available", sa.Integer, nullable=False),
)
reservations = sa.Table(
    "shop_reservations",
    meta,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("order_id", sa.String(200), nullable=False),
    sa.Column("sku", sa.String(100), nullable=False),
    sa.Column("qty", sa.Integer, nullable=False),
    sa.Column("released_by", sa.String(300)),
)
emails = sa.Table(
    "shop_emails",
    meta,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("order_id", sa.String(200), nullable=False),
    sa.Column("to", sa.String(300), nullable=False),
    sa.Column("subject", sa.String(300), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)


class OutOfStock(Exception):
    pass


@lru_cache(maxsize=1)
def engine() -> sa.Engine:
    eng = sa.create_engine(settings.DATABASE_URL, pool_pre_ping=True)
    for attempt in range(3):
        try:
            meta.create_all(eng)
            break
        except sa.exc.DBAPIError:  # workers and the web server creating the tables at once
            if attempt == 2:
                raise
            time.sleep(0.2)
    return eng


def add_stock(sku: str, qty: int) -> None:
    with engine().begin() as db:
        if (
            db.execute(
                sa.update(stock).where(stock.c.sku == sku).values(available=stock.c.available + qty)
            ).rowcount
            == 0
        ):
            db.execute(sa.insert(stock).values(sku=sku, available=qty))


def charge(key: str, order_id: str, amount: int) -> dict[str, Any]:
    with engine().begin() as db:
        row = db.execute(sa.select(payments).where(payments.c.key == key)).first()
        if row is None:
            db.execute(sa.insert(payments).values(key=key, order_id=order_id, amount=amount))
    return {"payment": key, "amount": amount}


def refund(key: str, payment: str) -> None:
    with engine().begin() as db:
        db.execute(
            sa.update(payments)
            .where(payments.c.key == payment, payments.c.refunded_by.is_(None))
            .values(refunded_by=key)
        )


def reserve(key: str, order_id: str, sku: str, qty: int) -> dict[str, Any]:
    with engine().begin() as db:
        if db.execute(sa.select(reservations).where(reservations.c.key == key)).first() is None:
            taken = db.execute(
                sa.update(stock)
                .where(stock.c.sku == sku, stock.c.available >= qty)
                .values(available=stock.c.available - qty)
            ).rowcount
            if taken == 0:
                raise OutOfStock(f"{sku}: fewer than {qty} in stock")
            db.execute(sa.insert(reservations).values(key=key, order_id=order_id, sku=sku, qty=qty))
    return {"reservation": key, "sku": sku, "qty": qty}


def release(key: str, reservation: str) -> None:
    with engine().begin() as db:
        row = db.execute(
            sa.select(reservations)
            .where(reservations.c.key == reservation, reservations.c.released_by.is_(None))
            .with_for_update()
        ).first()
        if row is not None:
            db.execute(
                sa.update(reservations).where(reservations.c.key == reservation).values(released_by=key)
            )
            db.execute(
                sa.update(stock).where(stock.c.sku == row.sku).values(available=stock.c.available + row.qty)
            )


def send_email(key: str, order_id: str, to: str, subject: str) -> dict[str, Any]:
    with engine().begin() as db:
        if db.execute(sa.select(emails).where(emails.c.key == key)).first() is None:
            db.execute(
                sa.insert(emails).values(key=key, order_id=order_id, to=to, subject=subject, at=time.time())
            )
    return {"email": key, "subject": subject}


def exists(table: sa.Table, key: str) -> bool:
    with engine().connect() as db:
        return db.execute(sa.select(table.c.key).where(table.c.key == key)).first() is not None


def order_view(order_id: str) -> dict[str, Any]:
    with engine().connect() as db:
        pays = db.execute(sa.select(payments).where(payments.c.order_id == order_id)).mappings().all()
        res = db.execute(sa.select(reservations).where(reservations.c.order_id == order_id)).mappings().all()
        mail = (
            db.execute(sa.select(emails).where(emails.c.order_id == order_id).order_by(emails.c.at))
            .mappings()
            .all()
        )
    return {
        "payments": [{"amount": p["amount"], "refunded": p["refunded_by"] is not None} for p in pays],
        "reservations": [
            {"sku": r["sku"], "qty": r["qty"], "released": r["released_by"] is not None} for r in res
        ],
        "emails": [m["subject"] for m in mail],
    }


def available(sku: str) -> int:
    with engine().connect() as db:
        return int(db.execute(sa.select(stock.c.available).where(stock.c.sku == sku)).scalar() or 0)
