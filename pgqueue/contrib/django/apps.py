"""The Django app config of pgqueue.contrib.django."""
from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
