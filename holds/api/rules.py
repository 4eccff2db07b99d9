"""/v0/ for rules and standing grants: read, save (a new version), backtest, create and revoke.

Thin as the rest of the API: parse -> service -> serialise. Reading needs a person or service account
(viewers too); saving rules needs an admin, creating a grant an approver of the capability, revoking one
an approver or an admin (services/rules.py asks each question).
"""

from datetime import datetime

from django.http import JsonResponse
from django.utils.dateparse import parse_datetime

from .. import policy, services
from ..auth import Actor
from ..backtest import backtest
from ..errors import Invalid, NotFound
from ..ids import GRANT, HOLD, parse_public_id, public_id
from ..models import Grant, Hold, HoldItem, RuleSet
from ..rules import WhenError, check_rules, compile_when
from ..services.rules import capability_by_name
from .common import caller, endpoint, read_json

MAX_RULES_BYTES = 256 * 1024


def reader(request) -> Actor:
    actor = caller(request)
    policy.require(policy.may_read(actor))
    return actor


def rule_set_wire(capability, rule_set: RuleSet | None) -> dict:
    return {
        "capability": capability.name,
        "version": rule_set.version if rule_set else 0,
        "rules": rule_set.rules if rule_set else [],
        "saved_by": rule_set.saved_by if rule_set else None,
        "saved_at": rule_set.created_at.isoformat() if rule_set else None,
    }


def grant_wire(grant: Grant) -> dict:
    return {
        "grant_id": grant.public_id,
        "capability": grant.capability.name,
        "when": grant.when,
        "comment": grant.comment or None,
        "created_by": grant.created_by,
        "created_at": grant.created_at.isoformat(),
        "expires_at": grant.expires_at.isoformat(),
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "last_used_at": grant.last_used_at.isoformat() if grant.last_used_at else None,
        "revoked_at": grant.revoked_at.isoformat() if grant.revoked_at else None,
        "revoked_by": grant.revoked_by or None,
        "from_hold_id": public_id(HOLD, grant.from_hold_id) if grant.from_hold_id else None,
        "from_item_id": grant.from_item_id or None,
    }


def _checked_rules(body) -> list:
    if not isinstance(body, dict) or "rules" not in body:
        raise Invalid([{"field": "rules", "message": "required: a list of {id, when, then, comment?}"}])
    rules, problems = check_rules(body["rules"])
    if problems:
        raise Invalid(
            [{"field": _field(p), **p.as_json()} for p in problems],
            "; ".join(map(str, problems)),
        )
    return rules


def _field(problem) -> str:
    return "rules" if problem.rule is None else f"rules[{problem.rule}].{problem.key}"


@endpoint("GET", "PUT")
def capability_rules(request, name: str):
    """GET: the current version. PUT {"rules": [...]}: a new version, answered with its backtest."""
    actor = reader(request)
    capability = capability_by_name(name)
    if request.method == "GET":
        return JsonResponse(rule_set_wire(capability, services.current_rule_set(capability)))
    body = read_json(request, MAX_RULES_BYTES)
    policy.require(policy.may_edit_rules(actor))
    rules = _checked_rules(body)
    result = backtest(capability, rules=rules)
    rule_set = services.rules_save(capability=capability, rules=body["rules"], actor=actor)
    return JsonResponse({**rule_set_wire(capability, rule_set), "backtest": result.as_json()})


@endpoint("POST")
def capability_backtest(request, name: str):
    """A rule list ({"rules": [...]}) or a grant's expression ({"when": "..."}) over the recorded decisions."""
    reader(request)
    capability = capability_by_name(name)
    body = read_json(request, MAX_RULES_BYTES)
    if isinstance(body, dict) and "when" in body and "rules" not in body:
        _compiled(body.get("when"))
        return JsonResponse(backtest(capability, grant_when=body["when"]).as_json())
    return JsonResponse(backtest(capability, rules=_checked_rules(body)).as_json())


def _compiled(when):
    try:
        return compile_when(when if isinstance(when, str) else "")
    except WhenError as exc:
        error = {"field": "when", "message": exc.message}
        if exc.line:
            error.update(line=exc.line, column=exc.column)
        raise Invalid([error], f"when: {exc}") from None


@endpoint("GET", "POST")
def capability_grants(request, name: str):
    """GET: the capability's grants, newest first, with uses. POST: a new grant, answered with its backtest."""
    actor = reader(request)
    capability = capability_by_name(name)
    if request.method == "GET":
        grants = Grant.objects.filter(capability=capability).select_related("capability").order_by("-id")[:500]
        return JsonResponse({"grants": [grant_wire(g) for g in grants]})
    body = read_json(request, MAX_RULES_BYTES)
    if not isinstance(body, dict):
        raise Invalid([{"field": "", "message": "a JSON object {when, expires_at, max_uses?, comment?}"}])
    expires_at = _time(body.get("expires_at"))
    hold, item_id = _source(body, capability)
    when = body.get("when")
    result = None
    if isinstance(when, str):
        _compiled(when)  # 422 with the position before anything is read
        result = backtest(capability, grant_when=when)
    grant = services.grant_create(
        capability=capability,
        when=when,
        expires_at=expires_at,
        max_uses=body.get("max_uses"),
        comment=body.get("comment") or "",
        actor=actor,
        hold=hold,
        item_id=item_id,
    )
    grant.capability = capability
    return JsonResponse({**grant_wire(grant), "backtest": result.as_json() if result else None}, status=201)


def _time(value) -> datetime | None:
    if value is None:
        return None
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise Invalid([{"field": "expires_at", "message": "an ISO 8601 time with its offset"}])
    return parsed


def _source(body: dict, capability) -> tuple[Hold | None, str]:
    """The decided item a grant is made from (optional): its hold must be of this capability."""
    hold_id, item_id = body.get("hold_id"), body.get("item_id")
    if hold_id is None:
        return None, ""
    pk = parse_public_id(hold_id, HOLD)
    hold = Hold.objects.select_related("capability").filter(pk=pk, capability=capability).first() if pk else None
    if hold is None:
        raise NotFound(f"hold {hold_id} of {capability.name} does not exist")
    if not isinstance(item_id, str) or not HoldItem.objects.filter(hold=hold, item_id=item_id).exists():
        raise Invalid([{"field": "item_id", "message": f"an item of {hold_id}"}])
    return hold, item_id


@endpoint("GET")
def grant_detail(request, grant_id: str):
    reader(request)
    grant = _grant(grant_id)
    return JsonResponse(grant_wire(grant))


@endpoint("POST")
def grant_revoke(request, grant_id: str):
    actor = reader(request)
    pk = _grant(grant_id).pk
    grant = services.grant_revoke(grant_id=pk, actor=actor)
    return JsonResponse(grant_wire(grant))


def _grant(grant_id: str) -> Grant:
    pk = parse_public_id(grant_id, GRANT)
    grant = Grant.objects.select_related("capability").filter(pk=pk).first() if pk else None
    if grant is None:
        raise NotFound(f"grant {grant_id} does not exist")
    return grant
