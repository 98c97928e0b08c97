from __future__ import annotations

from django.db import models


class Order(models.Model):
    """A business row written in the same transaction as its job."""

    number: models.IntegerField[int, int] = models.IntegerField(unique=True)
    invoiced: models.BooleanField[bool, bool] = models.BooleanField(default=False)
