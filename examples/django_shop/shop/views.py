"""The shop's view: POST /orders/<number> places the order and enqueues its invoice job in one
atomic block (a duplicate order is refused with 409 and leaves no job)."""
from __future__ import annotations

from django.db import IntegrityError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from shop.jobs import place_order


@csrf_exempt  # an API endpoint of the example: a real one authenticates its callers
@require_POST
def order(request: HttpRequest, number: int) -> JsonResponse:
    try:
        place_order(number)
    except IntegrityError:
        return JsonResponse({"detail": f"order {number} exists"}, status=409)
    return JsonResponse({"order": number})
