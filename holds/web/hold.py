"""One hold's page, its last look and its decision, and the files it lists. Thin: parse -> service ->
render.

Each page view serves the full page, or its fragment when HTMX asks (`template + "#fragment"`).
Every page works without JavaScript: links keep their href and forms their action. No view
changes a status: deciding is services.hold_decide, whose errors map to pages with their codes.
"""

from dataclasses import dataclass
from urllib.parse import quote, unquote

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget

from .. import presence, queries, ratelimit, rendering, services
from ..api.common import serve_file
from ..auth import Actor, actor_for_user
from ..errors import Conflict, Forbidden, Invalid, NotFound, RateLimited
from ..forms import DecisionForm, ItemForm, parse_confirmed
from ..ids import FILE, parse_public_id
from ..models import Capability, Hold, HoldItem, RunFile
from ..policy import (
    decide_refusal,
    is_open,
    may_create_grant,
    may_decide,
    may_read_file,
    sees_presence,
)
from ..responses import see_other
from ..schemas import COMMENT_MAX_CHARS, changed_fields
from ..words import Action
from . import by_confidence
from .common import load_hold, viewer

# --- one hold -----------------------------------------------------------------------------------


@dataclass
class ItemView:
    """One item as the page shows it: its table, flags, form state and, once decided, its outcome."""

    item: HoldItem
    form: ItemForm
    rows: list
    title_flags: list[str]
    id_flags: list[str]
    rank: int

    @property
    def flags(self) -> list[str]:
        seen = []
        for flag in self.title_flags + self.id_flags + [f for r in self.rows for f in r.key_flags + r.shown.flags]:
            if flag not in seen:
                seen.append(flag)
        return seen

    @property
    def actions(self) -> list[tuple[str, str]]:
        """This item's own actions (else the hold's), as (value, label)."""
        return [(a, Action(a).label) for a in self.form.actions]

    @property
    def details_html(self):
        return rendering.markdown_html(self.item.details_html)

    @property
    def details_flags(self) -> list[str]:
        return rendering.text_flags(self.item.details or "")

    @property
    def low_confidence(self) -> str:
        levels = {r.level for r in self.rows}
        return "red" if "red" in levels else "amber" if "amber" in levels else ""

    @property
    def decided_changes(self) -> list[tuple[str, object, object]]:
        if self.item.action != Action.EDIT or not isinstance(self.item.decided_data, dict):
            return []
        return changed_fields(self.item.data, self.item.decided_data)


def item_views(form: DecisionForm) -> list[ItemView]:
    views = []
    for item_form in form.items:
        item = item_form.item
        rows = rendering.field_rows(item.data or {}, item.confidence)
        title_flags, id_flags = rendering.text_flags(item.title), rendering.text_flags(item.item_id)
        views.append(
            ItemView(
                item=item,
                form=item_form,
                rows=rows,
                title_flags=title_flags,
                id_flags=id_flags,
                rank=rendering.item_rank(rows, title_flags, id_flags),
            )
        )
    # Flagged and low-confidence items first; asked order within each group.
    return sorted(views, key=lambda v: (v.rank, v.item.position))


EXTEND_CHOICES = (
    (3600, "1 hour"),
    (4 * 3600, "4 hours"),
    (24 * 3600, "24 hours"),
    (3 * 86400, "3 days"),
    (7 * 86400, "7 days"),
    (30 * 86400, "30 days"),
)


def extend_choices(hold: Hold) -> list[tuple[int, str]]:
    """The Extend control's lengths from now that end at least a minute after the hold's current
    expiry (a shorter one would be refused); none for a hold without expiry."""
    if hold.expires_at is None:
        return []
    left = (hold.expires_at - timezone.now()).total_seconds()
    return [(seconds, f"{label} from now") for seconds, label in EXTEND_CHOICES if seconds >= left + 60]


def _hold_context(request, hold: Hold, actor: Actor, form: DecisionForm | None = None) -> dict:
    items = queries.hold_items(hold)
    form = form or DecisionForm(hold, items)
    open_ = is_open(hold)
    decider = may_decide(actor, hold)
    return {
        "hold": hold,
        "run": hold.run,
        "form": form,
        "items": item_views(form),
        "files": queries.hold_files(hold),
        "resume": None if hold.status == Hold.Status.PENDING else queries.hold_resume(hold),
        "details_html": rendering.markdown_html(hold.details_html),
        "details_flags": rendering.text_flags(hold.details or ""),
        "intent_flags": rendering.text_flags(hold.intent),
        "is_open": open_,
        "may_decide": decider,
        "can_decide": decider and open_,
        # "Approve and remember…" (services.grant_create asks the same question again).
        "grantable": hold.status == Hold.Status.DECIDED and may_create_grant(actor, hold.capability, hold) is None,
        "overdue": hold.status == Hold.Status.PENDING and not open_,
        "actions": [(a, Action(a).label) for a in form.actions],
        "role": actor.role,
        "extend_choices": extend_choices(hold) if decider and open_ else [],
        "quorum": queries.hold_quorum(hold),
        "escalations": list(hold.escalations.order_by("step")),
        "bc_thresholds": by_confidence.THRESHOLDS,
        "comment_max": COMMENT_MAX_CHARS,
        **presence.hold_context(hold, request.user, shown=sees_presence(actor, hold)),
    }


@require_GET
@login_required
def hold_page(request, hold_id: str):
    actor = viewer(request)
    hold = load_hold(hold_id)
    context = _hold_context(request, hold, actor)
    template = "holds/hold.html"
    if request.htmx and request.htmx.target == "delivery":
        template += "#delivery"
    return render(request, template, context)


@require_POST
@login_required
def hold_review(request, hold_id: str):
    """The last look: what will be sent, before it is sent. Nothing is written here."""
    actor = viewer(request)
    hold = load_hold(hold_id)
    refusal = decide_refusal(actor, hold, request.POST.get("fingerprint") or "")
    if refusal is not None:
        return _refused(request, hold, refusal)
    form = DecisionForm(hold, queries.hold_items(hold), data=request.POST)
    if not form.is_valid():
        context = _hold_context(request, hold, actor, form)
        if request.htmx:
            response = render(request, "holds/hold.html#decision-form", context, status=422)
            return reswap(retarget(response, "#decision-form"), "outerHTML")
        return render(request, "holds/hold.html", context, status=422)
    views = item_views(form)
    context = {
        "hold": hold,
        "form": form,
        "items": views,
        "second_looks": second_looks(request, hold, views),
        "go_next": request.COOKIES.get(GO_NEXT) != "0",
        "copied_to": sum(1 for f in form.items if f.action in (Action.EDIT, Action.REJECT, Action.FEEDBACK)),
        "by_confidence": " ".join(_by_confidence(request, form.items)),
        "by_confidence_threshold": request.POST.get("by_confidence_threshold", ""),
        "role": actor.role,
    }
    template = "holds/review.html" + ("#last-look" if request.htmx else "")
    return render(request, template, context)


@require_POST
@login_required
def hold_decision(request, hold_id: str):
    """Confirm: the one write, through the service, which decides a hold at most once."""
    actor = actor_for_user(request.user)
    hold = load_hold(hold_id)
    body = parse_confirmed(request.POST.get("decision", ""))
    if body is None:
        return _refused(request, hold, Invalid([{"field": "decision", "message": "the decision is not valid JSON"}]))
    try:
        # The same budget as decisions through the API: one person, one count.
        ratelimit.api_limit("decision", actor)
        decided = services.hold_decide(
            hold_id=hold.pk,
            actor=actor,
            body=body,
            fingerprint=request.POST.get("fingerprint", ""),
            by_confidence=_by_confidence_ids(request, hold, body),
        )
    except (Conflict, Forbidden, Invalid, NotFound, RateLimited) as exc:
        return _refused(request, queries.hold_for_page(hold.pk) or hold, exc)
    if decided.status == Hold.Status.PENDING:
        # An approval toward a quorum that does not complete it: the hold stays here for the others.
        remaining = decided.quorum_state["remaining"]
        messages.success(
            request, f"Approval recorded. {remaining} more approval{'s' if remaining != 1 else ''} needed."
        )
        return see_other(reverse("hold", args=[hold.public_id]))
    go_next = request.POST.get("next") == "1"
    following = next_hold(actor, hold) if go_next else None
    if following is None:
        more = " No other hold waits for you." if go_next else ""
        messages.success(request, f"Decision recorded. The agent will be resumed with it.{more}")
        response = see_other(reverse("hold", args=[hold.public_id]))
    else:
        done = f"Decision recorded on {hold.public_id}; the agent will be resumed with it. Next, this hold:"
        messages.success(request, done)
        response = see_other(reverse("hold", args=[following.public_id]))
    # A cookie, not the session: the hold page's presence poll saves the session concurrently and
    # would write the old choice back. It only says which way the box starts next time.
    response.set_cookie(
        GO_NEXT,
        "1" if go_next else "0",
        max_age=365 * 86400,
        httponly=True,
        samesite="Lax",
        secure=settings.SESSION_COOKIE_SECURE,
    )
    return response


# The person's choice on the last look: after deciding, open the next hold (on unless they unticked it).
GO_NEXT = "rq_go_next"


def next_hold(actor: Actor, decided: Hold) -> Hold | None:
    """The first hold of the person's queue (the same order) that they may decide now and nobody
    else said they are on; None when none is left on its first page."""
    now = timezone.now()
    page = queries.queue_page(actor, list(Capability.objects.order_by("name")))
    for hold in page.rows:
        claimed_by_other = hold.claimed_until and hold.claimed_until > now and hold.claimed_by_id != actor.user.pk
        if hold.pk != decided.pk and not claimed_by_other and is_open(hold) and may_decide(actor, hold):
            return hold
    return None


def second_looks(request, hold: Hold, views: list[ItemView]) -> list[tuple[str, str]]:
    """What deserves a second look before confirming, as (agent-written subject, our words): flagged
    text and confidence below the red threshold (RQ_CONFIDENCE_RED) on items that send data on
    (approve, edit), and another reviewer's claim or presence. The last look lists them and asks
    for a tick first."""
    notes = [("", f"The intent has {flag}.") for flag in rendering.text_flags(hold.intent)]
    for view in views:
        if view.form.action not in (Action.APPROVE, Action.EDIT):
            continue
        notes += [(view.item.title, f"{flag}.") for flag in view.flags]
        red = settings.RQ_CONFIDENCE_RED
        notes += [
            (view.item.title, f"{r.key} has confidence {r.confidence:.2f}, below {red:g}.")
            for r in view.rows
            if r.level == "red"
        ]
    now = timezone.now()
    if hold.claimed_by_id and hold.claimed_until and hold.claimed_until > now and hold.claimed_by_id != request.user.pk:
        notes.append(("", f"{hold.claimed_by.get_username()} said they are on it."))
    looking = presence.others(hold.pk, request.user)
    if looking:
        notes.append(("", f"{', '.join(looking)} {'has' if len(looking) == 1 else 'have'} this hold open now."))
    return notes


def _by_confidence(request, item_forms) -> list[str]:
    """The items (url-quoted ids) that approve-by-confidence set and that are still approved."""
    applied = set(request.POST.get("by_confidence", "").split()[:100])
    return [
        quote(f.item.item_id, safe="")
        for f in item_forms
        if f.action == Action.APPROVE and quote(f.item.item_id, safe="") in applied
    ]


def _by_confidence_ids(request, hold: Hold, body) -> list[str]:
    """The confirmed decision's approved item ids that approve-by-confidence set (for calibration):
    those the form names that the server's own scoring at the form's threshold approves, so a crafted
    field can take no other approved item out of calibration."""
    applied = {unquote(x) for x in request.POST.get("by_confidence", "").split()[:100]}
    if not applied:
        return []
    views = item_views(DecisionForm(hold, queries.hold_items(hold)))
    applied &= by_confidence.set_by_threshold(hold, views, request.POST.get("by_confidence_threshold", ""))
    items = body.get("items") if isinstance(body, dict) else None
    return [
        i["id"]
        for i in items or []
        if isinstance(i, dict)
        and i.get("action") == Action.APPROVE
        and isinstance(i.get("id"), str)
        and i["id"] in applied
    ]


REFUSAL_TITLES = {
    "already_decided": "Already decided",
    "expired": "This hold expired",
    "cancelled": "This hold was cancelled",
    "changed": "This hold changed",
    "forbidden": "You may not decide this hold",
    "invalid": "The decision is not valid",
    "not_found": "Not found",
    "rate_limited": "Too many decisions",
}


def _refused(request, hold: Hold, exc) -> object:
    hold.refresh_from_db()
    context = {
        "hold": hold,
        "code": exc.code,
        "title": REFUSAL_TITLES.get(exc.code, "Refused"),
        "message": exc.message,
        "extra": exc.extra,
        "errors": getattr(exc, "errors", []),
        "by_you": bool(hold.decided_by) and hold.decided_by == request.user.get_username(),
        "role": actor_for_user(request.user).role,
    }
    template = "holds/refused.html" + ("#refusal" if request.htmx else "")
    response = render(request, template, context, status=exc.status)
    if "retry_after" in exc.extra:
        response["Retry-After"] = str(exc.extra["retry_after"])
    return response


# --- files --------------------------------------------------------------------------------------


@require_GET
@login_required
def file_download(request, file_id: str):
    actor = actor_for_user(request.user)
    pk = parse_public_id(file_id, FILE)
    run_file = RunFile.objects.filter(pk=pk).first() if pk else None
    # The same 404 for "no such file" and "not yours" (api.file_download).
    if run_file is None or may_read_file(actor, run_file) is not None:
        raise Http404(f"file {file_id} does not exist")
    return serve_file(run_file)
