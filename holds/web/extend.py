"""The hold page's Extend control: more time for a pending hold, with a required reason.

Thin: parse -> services.hold_extend -> a 303 back to the hold with a message. The choices
(web.hold.extend_choices) are the lengths from now that end after the hold's current expiry.
"""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from .. import ratelimit, rendering, services
from ..auth import actor_for_user
from ..responses import see_other
from .common import load_hold, service_errors


def _back(hold_id: str) -> str:
    return reverse("hold", args=[hold_id]) + "#extend"


@require_POST
@login_required
@service_errors(
    lambda hold_id: reverse("hold", args=[hold_id]) + "#extend", failed="Not extended: ", forbidden_message=True
)
def hold_extend(request, hold_id: str):
    actor = actor_for_user(request.user)
    hold = load_hold(hold_id)
    try:
        expires_in = int(request.POST.get("expires_in", ""))
    except ValueError:
        expires_in = request.POST.get("expires_in")
    body = {"expires_in": expires_in, "reason": request.POST.get("reason", "")}
    ratelimit.api_limit("decision", actor)
    hold = services.hold_extend(hold_id=hold.pk, actor=actor, body=body)
    left = rendering.span((hold.expires_at - timezone.now() + timedelta(seconds=1)).total_seconds())
    messages.success(request, f"Extended: it now expires in {left}, at {hold.expires_at:%Y-%m-%d %H:%M} UTC.")
    return see_other(reverse("hold", args=[hold.public_id]))
