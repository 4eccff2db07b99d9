""" "Approve and remember…" (key g on a decided hold): a standing grant from an approved item, its `when`
prefilled from the item's data, editable, previewed by a backtest before it is saved."""

import json
import re
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.views.decorators.http import require_http_methods

from .. import policy, queries, services
from ..auth import actor_for_user
from ..backtest import backtest
from ..errors import Forbidden, Invalid
from ..ids import HOLD, parse_public_id
from ..models import Action, Hold, HoldItem
from ..responses import see_other
from ..rules import MAX_WHEN_LENGTH, WhenError, compile_when

DEFAULT_DAYS = 30
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def prefilled_when(item: HoldItem) -> str:
    """`item.data.<key> == <value>` for each scalar field the item was approved with (edited: as
    decided), joined by &&; nested values are left for the person to add."""
    data = item.decided_data if item.action == Action.EDIT and item.decided_data is not None else item.data
    parts = []
    for key, value in (data or {}).items():
        if isinstance(value, (dict, list)):
            continue
        left = f"item.data.{key}" if _IDENTIFIER.match(key) else f"item.data[{json.dumps(key)}]"
        right = "null" if value is None else json.dumps(value, ensure_ascii=False)
        part = f"{left} == {right}"
        if len(" && ".join([*parts, part])) > MAX_WHEN_LENGTH:
            break
        parts.append(part)
    return " && ".join(parts) or "false"


def _hold_and_item(hold_id: str, item_id: str) -> tuple[Hold, HoldItem]:
    pk = parse_public_id(hold_id, HOLD)
    hold = queries.hold_for_page(pk) if pk else None
    item = HoldItem.objects.filter(hold_id=pk, item_id=item_id).first() if hold else None
    if item is None:
        raise Http404(f"hold {hold_id} has no item {item_id}")
    return hold, item


@require_http_methods(["GET", "POST"])
@login_required
def grant_new(request, hold_id: str):
    actor = actor_for_user(request.user)
    refusal = policy.may_read(actor)
    if refusal is not None:
        raise PermissionDenied(refusal.message)
    item_id = request.GET.get("item") or request.POST.get("item") or ""
    hold, item = _hold_and_item(hold_id, item_id)
    capability = hold.capability
    denied = policy.may_create_grant(actor, capability, hold)
    refusal = denied.message if denied is not None else None
    if refusal is None and (hold.status != Hold.Status.DECIDED or item.action not in (Action.APPROVE, Action.EDIT)):
        refusal = "Standing grants are made from an item a person approved."
    today = timezone.localdate()
    context = {
        "hold": hold,
        "item": item,
        "refusal": refusal,
        "when": prefilled_when(item),
        "expires_on": (today + timedelta(days=DEFAULT_DAYS)).isoformat(),
        "min_date": (today + timedelta(days=1)).isoformat(),
        "max_date": (today + timedelta(days=services.MAX_GRANT_DAYS)).isoformat(),
        "max_uses": "",
        "comment": "",
        "errors": {},
        "result": None,
        "nav": "history",
    }
    if request.method == "GET" or refusal:
        return render(
            request, "holds/grant_new.html", context, status=403 if refusal and request.method == "POST" else 200
        )
    post = request.POST
    context.update(when=post.get("when", ""), expires_on=post.get("expires_on", ""), comment=post.get("comment", ""))
    context["max_uses"] = post.get("max_uses", "").strip()
    expression, errors = None, {}
    try:
        expression = compile_when(context["when"])
    except WhenError as exc:
        errors["when"] = str(exc)
    day = parse_date(context["expires_on"]) if context["expires_on"] else None
    # The end of the chosen day, capped at 90 days from now.
    expires_at = None
    if day is None:
        errors["expires_on"] = "Choose the day the grant ends (at most 90 days from now)."
    else:
        expires_at = min(
            timezone.make_aware(timezone.datetime.combine(day, timezone.datetime.max.time())),
            timezone.now() + timedelta(days=services.MAX_GRANT_DAYS),
        )
    max_uses = None
    if context["max_uses"]:
        if not context["max_uses"].isdigit() or not context["max_uses"].isascii():
            errors["max_uses"] = "A whole number, or empty for no limit."
        else:
            max_uses = int(context["max_uses"])
    if expression is not None:
        context["result"] = backtest(capability, grant_when=context["when"])
    if errors or "save" not in post:
        context["errors"] = errors
        return render(request, "holds/grant_new.html", context, status=422 if errors else 200)
    try:
        grant = services.grant_create(
            capability=capability,
            when=context["when"],
            expires_at=expires_at,
            max_uses=max_uses,
            comment=context["comment"],
            actor=actor,
            hold=hold,
            item_id=item.item_id,
        )
    except Invalid as exc:
        context["errors"] = {e["field"].replace("expires_at", "expires_on"): e["message"] for e in exc.errors}
        return render(request, "holds/grant_new.html", context, status=422)
    except Forbidden as exc:
        context["refusal"] = exc.message
        return render(request, "holds/grant_new.html", context, status=403)
    result = context["result"]
    messages.success(
        request,
        f"Grant {grant.public_id} saved. On the last 90 days it would have approved {result.decided} item(s);"
        f" people decided {result.differ} of those otherwise.",
    )
    return see_other(reverse("capability-rules", args=[capability.name]) + "#grants")
