"""The shop's rows. ``Effect`` is the ledger a payment provider would keep: one row per idempotency
key (the first write wins), so a re-driven hook never charges or refunds twice."""

from django.db import models


class Order(models.Model):
    order_id = models.CharField(max_length=64, unique=True)
    amount = models.IntegerField()


class Effect(models.Model):
    key = models.CharField(max_length=200, unique=True)  # the idempotency key saga-worker hands the hook
    kind = models.CharField(max_length=20)  # hold, charge, reserve; release_hold, refund, release
    order_id = models.CharField(max_length=64)
