"""The ops page (/ops and its HTMX fragment), its chart's geometry, and the admins' Retry and Enable.

Figures come from the ops read model (rollup.py); Retry and Enable go through services.
"""

import math
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import dateformat
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_POST

from .. import rendering, rollup, services
from ..auth import actor_for_user
from ..errors import ServiceError
from ..models import Hold, HoldEscalation, Invocation
from ..responses import see_other
from ..rollup import HOUR, floor_hour, percentile
from .common import refused, viewer

LIST_LIMIT = 20
# Counts on the ops page stop here ("10000+"): past it the number no longer changes what ops do,
# and counting further would read rows in proportion to a backlog.
COUNT_CAP = 10_000


# --- the chart ----------------------------------------------------------------------------------


@dataclass
class Bar:
    hour: datetime
    decided: int
    expired: int
    x: float
    width: float
    y_decided: float
    h_decided: float
    y_expired: float
    h_expired: float


CHART_W, CHART_H, CHART_LEFT, CHART_BOTTOM, CHART_TOP = 720, 200, 36, 22, 8


def _nice_max(value: float) -> int:
    if value <= 4:
        return 4
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(math.ceil(step * magnitude))
    return int(value)


TICK_HALF_WIDTH = 15  # half of an "18:00" label in the axis font (11 px)


def _tick(bar) -> dict:
    """An hour label centred under its bar; under the last slots it ends at the chart's right edge
    instead, where centred it was cut off (at 18:00 the "0" was lost)."""
    x = round(bar.x + bar.width / 2, 2)
    at_edge = x + TICK_HALF_WIDTH > CHART_W
    return {"x": CHART_W if at_edge else x, "anchor": "end" if at_edge else "middle", "label": f"{bar.hour:%H}:00"}


def chart(hours: dict, now: datetime) -> dict:
    """Decisions and expiries per hour for the last 48 hours, as SVG geometry."""
    first = floor_hour(now) - 47 * HOUR
    series = []
    for n in range(48):
        hour = first + n * HOUR
        counts = hours.get(hour, {})
        series.append((hour, int(counts.get(("decided", ""), 0)), int(counts.get(("expired", ""), 0))))
    top = _nice_max(max((d + e for _, d, e in series), default=0))
    plot_w, plot_h = CHART_W - CHART_LEFT - 4, CHART_H - CHART_BOTTOM - CHART_TOP
    slot = plot_w / 48
    bars = []
    for n, (hour, decided, expired) in enumerate(series):
        h_decided = plot_h * decided / top
        h_expired = plot_h * expired / top
        base = CHART_TOP + plot_h
        bars.append(
            Bar(
                hour=hour,
                decided=decided,
                expired=expired,
                x=round(CHART_LEFT + n * slot + 1, 2),
                width=round(slot - 2, 2),
                y_decided=round(base - h_decided, 2),
                h_decided=round(h_decided, 2),
                y_expired=round(base - h_decided - h_expired, 2),
                h_expired=round(h_expired, 2),
            )
        )
    # Gridlines only where the value is a whole number of decisions.
    fractions = (0, 0.25, 0.5, 0.75, 1) if top % 4 == 0 else (0, 0.5, 1) if top % 2 == 0 else (0, 1)
    grid = [{"value": round(top * f), "y": round(CHART_TOP + plot_h * (1 - f), 2)} for f in fractions]
    ticks = [_tick(bar) for bar in bars if bar.hour.hour % 6 == 0]
    return {
        "bars": bars,
        "slots": [_slot(b, top=_text(CHART_TOP), plot_h=_text(plot_h)) for b in bars],
        "rows": [
            {
                "hour": _text(dateformat.format(b.hour, "Y-m-d H:i")),
                "decided": _text(b.decided),
                "expired": _text(b.expired),
            }
            for b in bars
            if b.decided or b.expired
        ],
        "grid": grid,
        "ticks": ticks,
        "width": CHART_W,
        "height": CHART_H,
        "left": CHART_LEFT,
        "top": CHART_TOP,
        "plot_h": plot_h,
        "right": CHART_W - 4,
        "base": CHART_TOP + plot_h,
        "label_y": CHART_H - 6,
        "total_decided": sum(d for _, d, _ in series),
        "total_expired": sum(e for _, _, e in series),
    }


def _slot(b: Bar, *, top: str, plot_h: str) -> dict:
    """One slot's values as the template writes them: text, so that the 48 slots' loop only looks up
    (a loop that formatted dates and numbers itself took 14 of the page's 20 ms at 1,000,000 holds).
    A bar of no height is left out (empty)."""
    return {
        "title": _text(dateformat.format(b.hour, "D H:i")),
        "decided": _text(b.decided),
        "expired": _text(b.expired),
        "x": _text(b.x),
        "width": _text(b.width),
        "top": top,
        "plot_h": plot_h,
        "y_decided": _text(b.y_decided),
        "h_decided": _text(b.h_decided) if b.h_decided else "",
        "y_expired": _text(b.y_expired),
        "h_expired": _text(b.h_expired) if b.h_expired else "",
    }


def _text(value) -> SafeString:
    # Numbers and "Fri 18:00" only: nothing to escape, and escaping 600 of them was a third of the loop.
    return SafeString(value)


# --- the page -----------------------------------------------------------------------------------


def _summary(counts: dict) -> dict:
    ttd = {label: v for (metric, label), v in counts.items() if metric == "ttd"}
    decided, expired = int(counts.get(("decided", ""), 0)), int(counts.get(("expired", ""), 0))
    p50, p90 = percentile(ttd, 0.5), percentile(ttd, 0.9)
    share = (expired / (decided + expired)) if decided + expired else None
    return {
        "decided": decided,
        "expired": expired,
        "resolved": decided + expired,
        "p50": p50,
        "p90": p90,
        "p50_text": rendering.span(p50),
        "p90_text": rendering.span(p90),
        "expired_share": share,
        "share_text": "—" if share is None else f"{share:.1%}".replace(".0%", "%"),
        # Decided at the ask by rules or standing grants: whole holds, and items (also on holds left
        # pending for the rest).
        "by_rule_holds": int(counts.get(("by_rule_holds", ""), 0)),
        "by_rule_items": int(counts.get(("by_rule_items", ""), 0)),
    }


def _behind(behind: dict | None) -> dict | None:
    """What the page says when the rollup lags past what one request counts live."""
    if behind is None:
        return None
    left_from, left_until = behind["left_out"]
    return {
        **behind,
        "text": rendering.span(behind["seconds"]),
        "left_from": left_from,
        "left_until": left_until,
        "live_minutes": round(rollup.LIVE_LIMIT.total_seconds() / 60),
    }


def ops_context(actor) -> dict:
    """Everything the ops page shows, in a fixed number of queries."""
    live = rollup.state()
    now = live["now"]
    by_pk = {c.pk: c for c in live["capabilities"]}
    pending = []
    for capability in live["capabilities"]:
        row = live["pending"].get(capability.pk)
        pending.append(
            {
                "capability": capability,
                "queue_url": reverse("queue") + "?" + urlencode({"capability": capability.name, "all": "1"}),
                "count": row["n"] if row else 0,
                "oldest": row["oldest"] if row else None,
            }
        )
    oldest = min((p["oldest"] for p in pending if p["oldest"]), default=None)
    soon = rollup.expiring_soon(now)
    expiring = list(
        soon.order_by("expires_at", "id").values("id", "intent", "capability_id", "expires_at")[:LIST_LIMIT]
    )
    for hold in expiring:
        hold["public_id"] = f"h_{hold['id']}"
        hold["capability"] = by_pk.get(hold["capability_id"])
    stuck = Invocation.objects.filter(status=Invocation.Status.UNDELIVERABLE)
    undeliverable = list(
        stuck.order_by("-created_at").values(
            "id", "kind", "run_id", "hold_id", "attempts", "last_error", "created_at", "run__capability__name"
        )[:LIST_LIMIT]
    )
    for inv in undeliverable:
        inv["hold_public_id"] = f"h_{inv['hold_id']}" if inv["hold_id"] else ""
    parked = dict(
        Invocation.objects.filter(status=Invocation.Status.PARKED)
        .values_list("run__capability_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    disabled = [
        {"capability": c, "parked": parked.get(c.pk, 0)}
        for c in live["capabilities"]
        if c.endpoint_disabled_at is not None
    ]
    stalled = [c for c in live["capabilities"] if c.endpoint_stalled_at is not None and c.endpoint_disabled_at is None]
    failing = [c for c in live["capabilities"] if c.endpoint_failing(now)]
    for row in pending:
        row["failing"] = row["capability"] in failing
    # Pending holds that took an escalation step (issue 34), latest step first.
    escalated = list(
        HoldEscalation.objects.filter(hold__status=Hold.Status.PENDING)
        .order_by("-at", "-id")
        .values("hold_id", "step", "notified", "at", "hold__intent", "hold__capability__name")[:LIST_LIMIT]
    )
    for row in escalated:
        row["public_id"] = f"h_{row['hold_id']}"
    windows = rollup.recent(now)
    return {
        "escalated": escalated,
        "now": now,
        "pending": pending,
        "pending_total": sum(p["count"] for p in pending),
        "oldest": oldest,
        "expiring": expiring,
        "expiring_count": soon[:COUNT_CAP].count(),
        "undeliverable": undeliverable,
        "undeliverable_count": stuck[:COUNT_CAP].count(),
        "disabled": disabled,
        "stalled": stalled,
        "failing": failing,
        "day": _summary(windows["day"]),
        "week": _summary(windows["week"]),
        "chart": chart(windows["hours"], now),
        "behind": _behind(windows["behind"]),
        "is_admin": actor.is_admin,
        "role": actor.role,
        "nav": "ops",
        "list_limit": LIST_LIMIT,
        "count_cap": COUNT_CAP,
    }


@require_GET
@login_required
def ops_page(request):
    actor = viewer(request)
    template = "holds/ops.html" + ("#ops-body" if request.htmx else "")
    return render(request, template, ops_context(actor))


@require_GET
@login_required
def ops_fragment(request):
    """The self-refreshing part of /ops (HTMX polls it; it is a plain page without JS too)."""
    actor = viewer(request)
    return render(request, "holds/ops.html#ops-body", ops_context(actor))


# --- admins' actions ----------------------------------------------------------------------------


def _act(request, do, done: str) -> HttpResponse:
    """Runs an admin action through services and goes back to /ops (303, so the browser GETs it)."""
    actor = actor_for_user(request.user)
    try:
        result = do(actor)
    except ServiceError as exc:
        return refused(request, exc, reverse("ops"))
    messages.success(request, done.format(result=result))
    return see_other(reverse("ops"))


@require_POST
@login_required
def ops_retry(request, invocation_id: str):
    return _act(
        request,
        lambda actor: services.invocation_retry(invocation_id=invocation_id, actor=actor),
        "{result.id} is due again and will be sent within seconds.",
    )


@require_POST
@login_required
def ops_enable(request, capability_id: int):
    return _act(
        request,
        lambda actor: services.capability_enable(capability_id=capability_id, actor=actor),
        "The endpoint of {result.name} is enabled; its parked invocations are due again.",
    )
