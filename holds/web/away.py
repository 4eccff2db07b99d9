"""Out of office (SPEC "Escalation and delegation"): a person sets their own window and delegate on
/away (linked from the top bar); an admin sets anyone's from the team page (/team/people/<id>/away).

Thin: parse -> services.person_set_away -> render. The window's times are UTC, as every time on these
pages; the delegates offered are policy.stand_ins, and the service checks the one chosen again
(policy.may_stand_in), so a crafted form gets the same 422 as the API.
"""

from datetime import UTC, datetime

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from .. import services
from ..auth import Actor, actor_for_user
from ..errors import Invalid
from ..policy import may_manage_team, may_set_away, stand_ins
from ..responses import see_other
from .common import forbid, viewer

# What <input type="datetime-local"> sends (seconds only when the person typed them).
FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")
SHOWN = "%Y-%m-%dT%H:%M"


@require_http_methods(["GET", "POST"])
@login_required
def away(request):
    """The signed-in person's own out-of-office."""
    actor = viewer(request)
    return _page(request, actor, request.user, back=reverse("away"))


@require_http_methods(["GET", "POST"])
@login_required
def person_away(request, user_id: int):
    """An admin sets or clears someone's out-of-office from the team page."""
    actor = actor_for_user(request.user)
    forbid(may_manage_team(actor))
    person = get_object_or_404(get_user_model().objects.select_related("membership__delegate"), pk=user_id)
    forbid(may_set_away(actor, person))
    return _page(request, actor, person, back=reverse("team") + "#people")


def _when(text: str) -> datetime | None:
    for fmt in FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _page(request, actor: Actor, person, *, back: str):
    own = person.pk == request.user.pk
    membership = getattr(person, "membership", None)
    now = timezone.now()
    current = None
    if membership is not None and membership.away_from and membership.away_until and membership.delegate:
        state = "ended" if membership.away_until <= now else "away" if membership.away_from <= now else "planned"
        current = {"membership": membership, "state": state}
    values = {
        "away_from": (membership.away_from if current else now).astimezone(UTC).strftime(SHOWN),
        "away_until": membership.away_until.astimezone(UTC).strftime(SHOWN) if current else "",
        "delegate": membership.delegate.username if current else "",
    }
    context = {
        "person": person,
        "own": own,
        "current": current,
        "choices": list(stand_ins(person).values_list("username", flat=True)),
        "values": values,
        "errors": {},
        "action": request.path,
        "back": back,
        "role": actor.role,
        "nav": "away" if own else "team",
    }
    if request.method == "GET":
        return render(request, "holds/away.html", context)
    whose = "You are" if own else f"{person.username} is"
    if "clear" in request.POST:
        services.person_set_away(actor=actor, person=person, clear=True)
        messages.success(request, f"{whose} no longer out of office: messages go to {'you' if own else 'them'} again.")
        return see_other(back)
    post = {key: request.POST.get(key, "").strip() for key in values}
    context["values"] = post
    errors = {}
    times = {}
    for key in ("away_from", "away_until"):
        times[key] = _when(post[key]) if post[key] else None
        if post[key] and times[key] is None:
            errors[key] = "a date and time such as 2026-12-24 09:00 (UTC)"
    if not errors:
        try:
            services.person_set_away(
                actor=actor,
                person=person,
                away_from=times["away_from"],
                away_until=times["away_until"],
                delegate=post["delegate"] or None,
            )
        except Invalid as exc:
            for error in exc.errors:
                errors.setdefault(error["field"], error["message"])
    if errors:
        context["errors"] = errors
        return render(request, "holds/away.html", context, status=422)
    messages.success(
        request,
        f"{whose} out of office from {times['away_from']:%Y-%m-%d %H:%M} until {times['away_until']:%Y-%m-%d %H:%M}"
        f" UTC; {post['delegate']} stands in, acting for {'you' if own else person.username}.",
    )
    return see_other(back)
