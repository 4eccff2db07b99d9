"""/v0/me/away: the signed-in person's own out-of-office window and delegate (SPEC "Escalation and
delegation"), the API twin of the /away page.

Who "me" is comes from the session, never from the body. Service-account keys and run tokens name no
person, so they have no out-of-office here (403); an admin sets someone else's on the team page.
"""

from django.http import JsonResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import services
from ..errors import Forbidden, Invalid
from ..models import Membership
from ..policy import may_read
from ..schemas import validate_away
from ..words import ActorKind
from .common import caller, endpoint, read_json

MAX_AWAY_BYTES = 4096


def away_wire(person) -> dict:
    membership = Membership.objects.select_related("delegate").filter(user=person).first()
    on = membership is not None and membership.delegate_id is not None and membership.away_from is not None
    now = timezone.now()
    return {
        "username": person.username,
        "away_from": membership.away_from.isoformat() if on else None,
        "away_until": membership.away_until.isoformat() if on else None,
        "delegate": membership.delegate.username if on else None,
        "away_now": on and membership.away_from <= now < membership.away_until,
    }


def _time(value: str, field: str):
    parsed = parse_datetime(value)
    if parsed is None or parsed.tzinfo is None:
        return None, {"field": field, "message": "an ISO 8601 time with its offset, such as 2026-12-24T09:00+00:00"}
    return parsed, None


@endpoint("GET", "PUT", "DELETE")
def me_away(request):
    """GET: the window. PUT {away_from, away_until, delegate}: sets it. DELETE: clears it."""
    actor = caller(request)
    if actor.kind != ActorKind.USER:
        raise Forbidden("only a signed-in person has an out-of-office; service accounts and runs have none")
    refusal = may_read(actor)
    if refusal is not None:
        raise refusal
    person = actor.user
    if request.method == "DELETE":
        services.person_set_away(actor=actor, person=person, clear=True)
    elif request.method == "PUT":
        body, errors = validate_away(read_json(request, MAX_AWAY_BYTES))
        times = {}
        if body is not None:
            for field in ("away_from", "away_until"):
                times[field], error = _time(getattr(body, field), field)
                errors += [error] if error else []
        if errors:
            raise Invalid(errors, "the out-of-office was not saved: " + "; ".join(e["message"] for e in errors))
        services.person_set_away(actor=actor, person=person, delegate=body.delegate, **times)
    return JsonResponse(away_wire(person))
