"""The queue (what to decide, most urgent first, with who else is on it) and the history of holds.
Thin: parse -> queries -> render; a refresh serves the rows' fragment (`#queue-rows`, `#history-rows`)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from .. import presence, queries
from ..auth import Actor, actor_for_user
from ..models import Capability, Hold
from ..paging import BadCursor
from ..policy import approves, decidable_ids
from .common import viewer

# --- queue --------------------------------------------------------------------------------------


@require_GET
@login_required
def queue(request):
    actor = actor_for_user(request.user)
    capabilities = list(Capability.objects.order_by("name"))
    by_name = {c.name: c for c in capabilities}
    capability = by_name.get(request.GET.get("capability", ""))
    search = request.GET.get("q", "").strip()[:200]
    show_all = request.GET.get("all") == "1"
    cursor = request.GET.get("after", "")
    try:
        page = queries.queue_page(
            actor, capabilities, show_all=show_all, capability=capability, search=search, cursor=cursor
        )
    except BadCursor:
        return _broken_link()
    # The highest hold id when the page was first shown; refreshes count what came after it.
    seen = _int(request.GET.get("seen"))
    if seen is None:
        seen = queries.latest_hold_id()
        new_ids = []
    else:
        new_ids = queries.queue_new_ids(
            actor, capabilities, show_all=show_all, capability=capability, search=search, seen=seen
        )
    filters = {"capability": capability.name if capability else "", "q": search, "all": "1" if show_all else ""}
    filters = {k: v for k, v in filters.items() if v}
    context = {
        "page": page,
        "capabilities": capabilities,
        "capability": capability,
        "search": search,
        "show_all": show_all,
        "decides_any": any(approves(actor, c) for c in capabilities),
        "role": actor.role,
        "new_count": len(new_ids),
        "new_more": len(new_ids) > queries.NEW_CAP,
        "new_ids": set(new_ids),
        "refresh_url": reverse("queue") + "?" + urlencode({**filters, "after": page.cursor, "seen": seen}),
        "next_url": reverse("queue") + "?" + urlencode({**filters, "after": page.next_cursor})
        if page.next_cursor
        else "",
        "first_url": reverse("queue") + ("?" + urlencode(filters) if filters else ""),
        "all_url": reverse("queue") + "?" + urlencode({**filters, "all": "1"}),
        "mine_url": reverse("queue") + "?" + urlencode({k: v for k, v in filters.items() if k != "all"}),
        "filtered": bool(capability or search),
        "nav": "queue",
    }
    _annotate_presence(actor, page.rows, request.user)
    template = "holds/queue.html" + ("#queue-rows" if request.htmx else "")
    return render(request, template, context)


def _annotate_presence(actor: Actor, rows: list[Hold], user) -> None:
    """Who else is looking at, and who claimed, each row the person may decide (one cache round trip);
    the others ("All pending") are marked view only."""
    now = timezone.now()
    # Only where they may decide (policy.decidable_ids): a run's starter sees no claim on their own run's hold.
    allowed = decidable_ids(actor, rows)
    for hold in rows:
        hold.view_only = hold.pk not in allowed
    deciding = [h for h in rows if h.pk in allowed]
    looking = presence.others_many([h.pk for h in deciding], user)
    for hold in deciding:
        hold.looking = looking.get(hold.pk, [])
        live = hold.claimed_until is not None and hold.claimed_until > now and hold.claimed_by is not None
        hold.claim_name = hold.claimed_by.get_username() if live else ""


def _int(text) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() and len(text) < 19 else None


# --- history ------------------------------------------------------------------------------------


def _broken_link() -> HttpResponseBadRequest:
    # A crafted or damaged `after=`: the list's first page is one link away.
    return HttpResponseBadRequest(
        "This page link is not one this server gave out; open the list from its first page.",
        content_type="text/plain; charset=utf-8",
    )


@require_GET
@login_required
def history(request):
    actor = viewer(request)
    capabilities = list(Capability.objects.order_by("name"))
    capability = {c.name: c for c in capabilities}.get(request.GET.get("capability", ""))
    status = request.GET.get("status", "")
    status = status if status in queries.HISTORY_STATUSES else ""
    search = request.GET.get("q", "").strip()[:200]
    try:
        page = queries.history_page(
            capability=capability, status=status, search=search, cursor=request.GET.get("after", "")
        )
    except BadCursor:
        return _broken_link()
    filters = {
        k: v
        for k, v in {"capability": capability.name if capability else "", "status": status, "q": search}.items()
        if v
    }
    context = {
        "page": page,
        "capabilities": capabilities,
        "capability": capability,
        "status": status,
        "search": search,
        "statuses": queries.HISTORY_STATUSES,
        "next_url": reverse("history") + "?" + urlencode({**filters, "after": page.next_cursor})
        if page.next_cursor
        else "",
        "first_url": reverse("history") + ("?" + urlencode(filters) if filters else ""),
        "filtered": bool(filters),
        "nav": "history",
        "role": actor.role,
    }
    template = "holds/history.html" + ("#history-rows" if request.htmx else "")
    return render(request, template, context)
