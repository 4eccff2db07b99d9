"""Rules and standing grants: saved as versions, applied at the ask, replayed over the past (backtest).

The one place where rules are evaluated (SPEC Round 3): services.asks calls `decide_at_ask` for every
ask, whichever protocol made it. A capability without rules or grants costs the ask nothing: the ask's
statement returns the capability's `rules_version` and `grants_version`, both 0.

Order per item: the capability's rules in order, then its live grants oldest first; the first that
matches decides (a rule whose `then` is `ask` or a quorum leaves the item to people and stops there).
"""

import hashlib
import json
import threading
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import policy
from ..auth import Actor
from ..errors import Invalid, NotFound
from ..ids import GRANT, public_id
from ..models import (
    Action,
    AuditEvent,
    AuditKind,
    Capability,
    Grant,
    Hold,
    HoldItem,
    RuleSet,
    decider_label,
)
from ..rules import (
    Problem,
    Rule,
    activation,
    check_rules,
    compile_list,
    compile_when,
    first_true,
    item_context,
    rules_from_json,
    uses_flags,
)
from . import gateway, sql
from .audit import audit
from .decisions import write_decision

MAX_GRANT_DAYS = 90

# --- saving -------------------------------------------------------------------------------------


def capability_by_name(name: str) -> Capability:
    capability = Capability.objects.filter(name=name).first()
    if capability is None:
        raise NotFound(f"capability {name} does not exist")
    return capability


def rules_save(*, capability: Capability, rules, actor: Actor) -> RuleSet:
    """A new version of the capability's rules, checked and compiled first (422 with each problem's
    rule, key and position), audited. An unchanged list is still a new version: a save is a save."""
    policy.require(policy.may_edit_rules(actor))
    checked, problems = check_rules(rules)
    if problems:
        raise Invalid([p.as_json() for p in problems], "the rules were not saved: " + "; ".join(map(str, problems)))
    stored = [rule.as_json() for rule in checked]
    with transaction.atomic():
        locked = Capability.objects.select_for_update().get(pk=capability.pk)
        _refuse_unmeetable_quorums(locked, checked)
        version = locked.rules_version + 1
        rule_set = RuleSet.objects.create(capability=locked, version=version, rules=stored, saved_by=actor.label)
        Capability.objects.filter(pk=locked.pk).update(rules_version=version)
        audit(AuditKind.RULES_SAVED, actor, capability=locked.name, version=version, rules=stored)
    capability.rules_version = version
    return rule_set


def _refuse_unmeetable_quorums(capability: Capability, rules: list[Rule]) -> None:
    """A rule's `then: {quorum: N, from: [roles]}` that the people and service accounts who may decide
    this capability could never meet is refused as the capability's own `quorum:` is on load (the same
    question, policy.quorum_unmeetable): a hold it matched would stay pending until it expired."""
    errors = []
    for n, rule in enumerate(rules):
        unmeetable = rule.then == "quorum" and policy.quorum_unmeetable(capability, rule.quorum)
        if unmeetable:
            problem = Problem(n, "then", unmeetable)
            errors.append({"field": f"rules[{n}].then", **problem.as_json(), "message": str(problem)})
    if errors:
        raise Invalid(errors, "the rules were not saved: " + "; ".join(e["message"] for e in errors))


def current_rule_set(capability: Capability) -> RuleSet | None:
    if not capability.rules_version:
        return None
    return RuleSet.objects.filter(capability=capability, version=capability.rules_version).first()


# --- grants -------------------------------------------------------------------------------------


def grant_create(
    *,
    capability: Capability,
    when: str,
    expires_at,
    max_uses=None,
    comment: str = "",
    actor: Actor,
    hold=None,
    item_id="",
) -> Grant:
    """A standing grant: `then: approve` for items matching `when`, until `expires_at` (≤ 90 days)."""
    policy.require(policy.may_create_grant(actor, capability, hold))
    errors = []
    try:
        compile_when(when if isinstance(when, str) else "")
    except Exception as exc:  # WhenError
        error = {"field": "when", "message": getattr(exc, "message", str(exc))}
        if getattr(exc, "line", None):
            error.update(line=exc.line, column=exc.column)
        errors.append(error)
    now = timezone.now()
    if expires_at is None:
        errors.append({"field": "expires_at", "message": f"required: a time within {MAX_GRANT_DAYS} days"})
    elif expires_at <= now or expires_at > now + timedelta(days=MAX_GRANT_DAYS):
        errors.append(
            {"field": "expires_at", "message": f"must be in the future and at most {MAX_GRANT_DAYS} days away"}
        )
    if max_uses is not None and (
        isinstance(max_uses, bool) or not isinstance(max_uses, int) or not 1 <= max_uses <= 1_000_000
    ):
        errors.append({"field": "max_uses", "message": "a whole number from 1 to 1000000, or none"})
    if not isinstance(comment, str) or len(comment) > 2000:
        errors.append({"field": "comment", "message": "text of at most 2000 characters"})
    if errors:
        raise Invalid(errors, "the grant was not saved")
    with transaction.atomic():
        grant = Grant.objects.create(
            capability=capability,
            when=when,
            comment=comment,
            created_by=actor.label,
            created_by_user=actor.user if actor.kind == "user" else None,
            created_by_account=actor.account if actor.kind == "account" else None,
            from_hold=hold,
            from_item_id=item_id or "",
            expires_at=expires_at,
            max_uses=max_uses,
        )
        Capability.objects.filter(pk=capability.pk).update(grants_version=F("grants_version") + 1)
        audit(
            AuditKind.GRANT_CREATED,
            actor,
            hold_id=hold.pk if hold is not None else None,
            grant=grant.public_id,
            capability=capability.name,
            when=when,
            expires_at=expires_at.isoformat(),
            max_uses=max_uses,
        )
    return grant


def grant_revoke(*, grant_id: int, actor: Actor) -> Grant:
    """Revoked at once: an ask that has not yet taken its use (a conditional UPDATE on this row) no
    longer can; one that has, applied it whole (services: the use and the decision are one transaction)."""
    grant = Grant.objects.select_related("capability").filter(pk=grant_id).first()
    if grant is None:
        raise NotFound(f"grant {public_id(GRANT, grant_id)} does not exist")
    policy.require(policy.may_revoke_grant(actor, grant.capability))
    with transaction.atomic():
        updated = Grant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=actor.label
        )
        if updated:
            Capability.objects.filter(pk=grant.capability_id).update(grants_version=F("grants_version") + 1)
            audit(AuditKind.GRANT_REVOKED, actor, grant=grant.public_id, capability=grant.capability.name)
    grant.refresh_from_db()
    return grant


# --- at the ask -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """What one process keeps per capability: the rules of `rules_version` and the grants as of
    `grants_version`, compiled once, each list also as one expression (rules.compile_list)."""

    rules_version: int
    grants_version: int
    rules: list[Rule]
    grants: list[tuple[int, object, object]]  # (pk, expression, expires_at)
    rules_list: object = None
    grants_list: object = None
    flags: bool = True  # whether any expression reads item.flags


_compiled: dict[int, Compiled] = {}
_lock = threading.Lock()


def _compiled_for(capability_id: int, rules_version: int, grants_version: int) -> Compiled:
    kept = _compiled.get(capability_id)
    if kept and kept.rules_version == rules_version and kept.grants_version == grants_version:
        return kept
    rules = []
    if rules_version:
        stored = RuleSet.objects.filter(capability_id=capability_id, version=rules_version).values_list(
            "rules", flat=True
        )
        rules = rules_from_json(stored.first() or [])
    grants, grant_sources = [], []
    if grants_version:
        live = Grant.objects.filter(capability_id=capability_id, revoked_at__isnull=True, expires_at__gt=timezone.now())
        for pk, when, expires_at in live.order_by("id").values_list("pk", "when", "expires_at"):
            grants.append((pk, compile_when(when), expires_at))
            grant_sources.append(when)
    rule_sources = [rule.when for rule in rules]
    compiled = Compiled(
        rules_version,
        grants_version,
        rules,
        grants,
        compile_list(tuple(rule_sources)),
        compile_list(tuple(grant_sources)),
        uses_flags(rule_sources + grant_sources),
    )
    with _lock:
        _compiled[capability_id] = compiled
    return compiled


def _first_match(compiled: Compiled, context: dict, offers_approve: bool, now) -> tuple[str, dict | None, str | None]:
    """(action, decided_by, comment) for one item; action "" leaves it to people."""
    bound = activation(context)
    index, _ = first_true([rule.expression for rule in compiled.rules], compiled.rules_list, bound)
    if index is not None:
        rule = compiled.rules[index]
        if rule.then == Action.APPROVE and offers_approve:
            return Action.APPROVE, {"type": "rule", "id": rule.id, "version": compiled.rules_version}, None
        if rule.then == Action.REJECT:
            return Action.REJECT, {"type": "rule", "id": rule.id, "version": compiled.rules_version}, rule.comment
        if rule.then == "quorum":
            # Left to people, who must reach this quorum (decide_at_ask stores it on the hold).
            return "quorum", {**rule.quorum, "rule": rule.id, "version": compiled.rules_version}, None
        # ask, or approve on an item that does not offer approve.
        return "", None, None
    if offers_approve:
        # A grant past its end in this process's copy is skipped here; the UPDATE that takes its use
        # checks the end again by the database's clock.
        live = [(pk, expression) for pk, expression, expires_at in compiled.grants if expires_at > now]
        combined = compiled.grants_list if len(live) == len(compiled.grants) else None
        index, _ = first_true([expression for _, expression in live], combined, bound)
        if index is not None:
            return Action.APPROVE, {"type": "grant", "id": public_id(GRANT, live[index][0])}, None
    return "", None, None


def decide_at_ask(hold: Hold, items: list[dict], *, versions: tuple[int, int], capability_name: str, run_input) -> None:
    """Applies the capability's rules and grants to a hold just written pending (asks calls this only
    when `versions`, the capability's (rules_version, grants_version), are not both 0). Every item
    decided: the hold is decided as a person's decision would be (resolved_by "rule"), its resume
    waiting for the asker's answer as usual. Some: those items are decided and the hold stays pending
    with the rest. Grants' uses are taken in the same transaction, by a conditional UPDATE each, so
    `max_uses` and a revocation hold under concurrent asks: a grant either applies whole or not at all."""
    compiled = _compiled_for(hold.capability_id, *versions)
    if not compiled.rules and not compiled.grants:
        return
    now = timezone.now()
    choices = []
    for item in items:
        offers = Action.APPROVE in (item["actions"] or hold.actions)
        context = item_context(
            item_id=item["id"],
            title=item["title"],
            data=item["data"],
            confidence=item["confidence"],
            run_input=run_input,
            capability=capability_name,
            flags=compiled.flags,
            data_text=item.get("data_text"),
        )
        choices.append(_first_match(compiled, context, offers, now))
    quorums = [decided_by for action, decided_by, _ in choices if action == "quorum"]
    if quorums:
        _require_quorum(hold, max(quorums, key=lambda q: q["approvals"]))
        choices = [("", None, None) if action == "quorum" else (action, by, c) for action, by, c in choices]
    if not any(action for action, _, _ in choices):
        return
    with transaction.atomic():
        choices = _take_grant_uses(choices, now)
        if not any(action for action, _, _ in choices):
            return
        if all(action for action, _, _ in choices):
            _decide_whole(hold, items, choices)
        else:
            _decide_some(hold, items, choices)


def _require_quorum(hold: Hold, quorum: dict) -> None:
    """A rule's `then: {quorum: N, from: [roles]}` matched an item: the hold needs that quorum (the
    stricter of it and the capability's, policy.quorum_of). Written only while the hold is pending."""
    Hold.objects.filter(pk=hold.pk, status=Hold.Status.PENDING).update(quorum=quorum)
    hold.quorum = quorum


def _take_grant_uses(choices: list, now) -> list:
    """Takes each used grant's uses (one per item) where it is still live and has them left; items of a
    grant that could not be taken go back to people."""
    wanted: dict[int, int] = {}
    for _, decided_by, _ in choices:
        if decided_by and decided_by["type"] == "grant":
            pk = int(decided_by["id"].split("_")[1])
            wanted[pk] = wanted.get(pk, 0) + 1
    if not wanted:
        return choices
    rows = gateway.fetch(sql.TAKE_GRANT_USES, [now, list(wanted), list(wanted.values())])
    taken = {public_id(GRANT, row[0]) for row in rows}
    kept = []
    for choice in choices:
        decided_by = choice[1]
        lost = decided_by is not None and decided_by["type"] == "grant" and decided_by["id"] not in taken
        kept.append(("", None, None) if lost else choice)
    return kept


def _decider(choices: list) -> str:
    """The hold's decided_by when rules or grants decided it: `rule small v3`, or each one that did,
    in order of first use (`rule small v3, grant grt_5`), within the column's 200 characters."""
    labels = list(dict.fromkeys(decider_label(decided_by) for _, decided_by, _ in choices if decided_by))
    text = ", ".join(labels)
    return text if len(text) <= 200 else text[:197] + "..."


def _audit_grant_uses(hold: Hold, items: list[dict], choices: list) -> list[AuditEvent]:
    by_grant: dict[str, list[str]] = {}
    for item, (_, decided_by, _) in zip(items, choices, strict=True):
        if decided_by and decided_by["type"] == "grant":
            by_grant.setdefault(decided_by["id"], []).append(item["id"])
    return [
        AuditEvent(
            kind=AuditKind.GRANT_USED,
            actor=f"grant {grant}",
            run_id_ref=hold.run_id,
            hold_id_ref=hold.pk,
            data={"grant": grant, "items": ids},
        )
        for grant, ids in by_grant.items()
    ]


def _item_pks(hold: Hold) -> list[int]:
    return [row[0] for row in gateway.fetch(sql.ITEM_PKS, [hold.pk])]


def _decide_whole(hold: Hold, items: list[dict], choices: list) -> None:
    decider = _decider(choices)
    rows = []
    resume_items = []
    for pk, item, (action, decided_by, comment) in zip(_item_pks(hold), items, choices, strict=True):
        rows.append(
            HoldItem(
                pk=pk,
                item_id=item["id"],
                data=item["data"],  # not written: the receipt states its hash
                action=action,
                decided_data=None,
                comment=comment,
                decided_by=decided_by,
            )
        )
        resume_items.append(
            {"id": item["id"], "action": action, "data": item["data"], "comment": comment, "decided_by": decided_by}
        )
    resume = {"hold_id": hold.public_id, "resolved_by": "rule", "items": resume_items, "comment": None}
    event = AuditEvent(
        kind=AuditKind.HOLD_DECIDED,
        actor=decider,
        run_id_ref=hold.run_id,
        hold_id_ref=hold.pk,
        data={
            "actions": {i["id"]: i["action"] for i in resume_items},
            "comment": None,
            "decided_by": {i["id"]: i["decided_by"] for i in resume_items},
        },
    )
    stamp = {
        "status": Hold.Status.DECIDED.value,
        "decided_at": timezone.now(),
        "decided_by": decider,
        "decided_by_user_id": None,
        "decided_by_account_id": None,
        "comment": None,
    }
    invocation = write_decision(hold, rows, stamp, resume, event)
    if invocation is None:
        # A person decided it in the moment since it was written: theirs stands, and no grant was used.
        transaction.set_rollback(True)
        return
    AuditEvent.objects.bulk_create(_audit_grant_uses(hold, items, choices))
    hold.status, hold.decided_at, hold.decided_by = stamp["status"], stamp["decided_at"], decider


def _decide_some(hold: Hold, items: list[dict], choices: list) -> None:
    """Some items decided, the hold pending with the rest. Taking the hold's row (and changing its
    fingerprint) first: a person's form that showed every item open is refused as changed, and a
    decision that won meanwhile keeps every item as that person decided it."""
    decided = [(item["id"], c) for item, c in zip(items, choices, strict=True) if c[0]]
    fingerprint = hashlib.sha256(
        (hold.fingerprint + json.dumps([[i, a, d, c] for i, (a, d, c) in decided], sort_keys=True)).encode()
    ).hexdigest()
    if not gateway.fetch(sql.RULE_TAKE_HOLD, [fingerprint, hold.pk]):
        transaction.set_rollback(True)
        return
    gateway.fetch(
        sql.RULE_DECIDE_ITEMS,
        [
            [i for i, _ in decided],
            [c[0] for _, c in decided],
            [c[2] for _, c in decided],
            [json.dumps(c[1]) for _, c in decided],
            hold.pk,
        ],
    )
    events = [
        AuditEvent(
            kind=AuditKind.HOLD_DECIDED_BY_RULE,
            actor=_decider([c for _, c in decided]),
            run_id_ref=hold.run_id,
            hold_id_ref=hold.pk,
            data={"actions": {i: c[0] for i, c in decided}, "decided_by": {i: c[1] for i, c in decided}},
        ),
        *_audit_grant_uses(hold, items, choices),
    ]
    AuditEvent.objects.bulk_create(events)
    hold.fingerprint = fingerprint
