"""Approve by confidence, with a preview: which items a threshold approves and which stay undecided,
and why. The server scores (no client-side scoring): the preview is an HTMX fragment, and applying
it only checks the listed items' Approve radios; the reviewer still decides the rest and submits
through the usual last look.

An item's confidence is its lowest stated value; an item without any takes the capability's
`confidence_default`, and stays undecided when there is none. An item with a flag (hidden characters,
mixed scripts) always stays. Only items that offer approve are touched (SPEC "Approve shortcuts").
"""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from .. import queries
from ..forms import DecisionForm
from ..policy import decide_refusal
from .by_confidence import DEFAULT_THRESHOLD, THRESHOLDS, score
from .common import load_hold, viewer
from .hold import item_views


@require_POST
@login_required
def by_confidence_preview(request, hold_id: str):
    actor = viewer(request)
    hold = load_hold(hold_id)
    if decide_refusal(actor, hold) is not None:
        return HttpResponse("This hold cannot be decided by you now.", status=403, content_type="text/plain")
    chosen = request.POST.get("threshold", DEFAULT_THRESHOLD)
    if chosen not in THRESHOLDS:
        return HttpResponse("Choose one of " + ", ".join(THRESHOLDS) + ".", status=422, content_type="text/plain")
    views = item_views(DecisionForm(hold, queries.hold_items(hold)))
    scored = score(hold, views, float(chosen))
    context = {
        "hold": hold,
        "threshold": chosen,
        "approved": [s for s in scored if s.approve],
        "stay": [s for s in scored if not s.approve],
    }
    return render(request, "holds/hold.html#by-confidence-preview", context)
