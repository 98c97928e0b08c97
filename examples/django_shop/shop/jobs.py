"""The project's pgqueue App: its handler uses the ORM (manage.py pgqueue worker sets Django
up first)."""
import pgqueue
from pgqueue.contrib.django import queue

app = pgqueue.App()


@app.job("invoice")
def invoice(job: pgqueue.JobContext) -> None:
    from shop.models import Order

    Order.objects.filter(number=job.json()["order"]).update(invoiced=True)


def place_order(number: int, *, fail: bool = False) -> None:
    """An order and its invoice job in one atomic block: both, or (fail) neither."""
    from django.db import connection, transaction
    from shop.models import Order

    with transaction.atomic():
        Order.objects.create(number=number)
        queue().enqueue({"order": number}, kind="invoice", conn=connection)
        if fail:
            raise RuntimeError("the order failed after its job was enqueued")
