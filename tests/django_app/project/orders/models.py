"""The project's one model: a payment, written with the ORM by the in_transaction tool ``pay_in_db``."""

from django.db import models


class Payment(models.Model):  # type: ignore[misc]
    key = models.CharField(max_length=200, unique=True)  # the call's idempotency key
    amount = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.key}: {self.amount}"
