"""The hold page's presence line and its "I'm on it" claim. Thin: presence.py (cache) and
services.hold_claim / hold_claim_renew / hold_release (database)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from .. import presence, ratelimit, services
from ..errors import ServiceError
from ..models import Hold
from ..policy import is_open, sees_presence
from ..responses import see_other
from .common import load_hold, problems, viewer


def _context(request, hold, actor) -> dict:
    return {"hold": hold, **presence.hold_context(hold, request.user, shown=sees_presence(actor, hold))}


@require_POST
@login_required
def hold_presence(request, hold_id: str):
    """The page's poll: marks the person present (cache), renews their claim at most once a minute,
    and answers the presence line."""
    actor = viewer(request)
    hold = load_hold(hold_id)
    # Only a claim of theirs that was renewed over a minute ago is written (the service re-checks
    # with the database's clock).
    due = timezone.now() + services.CLAIM_FOR - services.RENEW_EVERY
    if hold.claimed_by_id == request.user.pk and hold.claimed_until and hold.claimed_until <= due:
        if sees_presence(actor, hold) and services.hold_claim_renew(hold_id=hold.pk, actor=actor):
            hold = load_hold(hold_id)
    # Still open at the first poll: the hold was seen (its timeline's word), written once per person.
    # Not at the page view: a glance is not a look, and the page itself stays free of writes.
    if sees_presence(actor, hold) and presence.first_look(hold, request.user):
        services.hold_seen(hold_id=hold.pk, run_id=hold.run_id, actor=actor)
    # Decided, expired or cancelled since the page opened (here or elsewhere): the page is told within
    # one poll and stops offering what could no longer be sent.
    ended = hold.status != Hold.Status.PENDING or not is_open(hold)
    return render(request, "holds/hold.html#presence", {**_context(request, hold, actor), "ended": ended})


@require_POST
@login_required
def hold_claim(request, hold_id: str):
    actor = viewer(request)
    hold = load_hold(hold_id)
    try:
        # Each take and release writes an audit row: a person's cycles are bounded (RQ_RATE_CLAIM).
        ratelimit.api_limit("claim", actor)
        if request.POST.get("release"):
            services.hold_release(hold_id=hold.pk, actor=actor)
            note = "Released: others see it as unclaimed."
        else:
            services.hold_claim(hold_id=hold.pk, actor=actor)
            note = "You are on it: others see it as claimed by you for 15 minutes, renewed while this page is open."
    except ServiceError as exc:
        note = None
        messages.error(request, f"Not claimed: {problems(exc)}")
    if request.htmx:
        return render(
            request, "holds/hold.html#presence", {**_context(request, load_hold(hold_id), actor), "note": note}
        )
    if note:
        messages.success(request, note)
    return see_other(reverse("hold", args=[hold.public_id]))
