"""The public keys that verify decision receipts (holds/services/receipts.py), for anyone: no key needed."""

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from ..services import receipts


@require_GET
def jwks(request):
    response = JsonResponse(receipts.jwks())
    # Verifiers may cache the set; a rotation adds a key, so a stale copy only lacks the newest kid
    # (which the SDKs then fetch once).
    response["Cache-Control"] = "public, max-age=300"
    return response
