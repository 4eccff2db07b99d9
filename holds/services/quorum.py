"""Quorum (SPEC "Quorum and separation of duties"): a hold that needs N distinct approvals collects them
here, one row each, under the hold's row lock; decisions.hold_decide writes the decision when the Nth
approval of the same data arrives, in the same transaction (so exactly one resume, and a reject that
raced it finds the hold decided, or decides first and this finds it so).
"""

import hashlib
import json

from django.utils import timezone

from ..auth import Actor
from ..errors import Conflict
from ..models import Action, AuditEvent, AuditKind, Hold, HoldApproval
from ..policy import hold_refusal
from ..schemas import DecisionIn
from ..words import ActorKind
from . import gateway, sql


def is_approval(decision: DecisionIn) -> bool:
    """Only a decision that approves or edits every item counts toward a quorum; any other action (a
    reject, feedback) decides the hold at once, like a veto."""
    return all(item.action in (Action.APPROVE, Action.EDIT) for item in decision.items)


def decision_hash(decision: DecisionIn) -> str:
    """SHA-256 of what is approved (item ids, actions and edited data; canonical JSON): approvals count
    together only when this is the same."""
    items = sorted(({"id": i.id, "action": i.action, "data": i.data} for i in decision.items), key=lambda i: i["id"])
    canonical = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def approval_wire(approval: HoldApproval) -> dict:
    return {"by": approval.label, "at": approval.at.isoformat(), "data_hash": approval.data_hash}


def approve(hold: Hold, actor: Actor, decision: DecisionIn) -> list[HoldApproval]:
    """Records the actor's approval; returns the approvals of the same data, oldest first (this one last).
    The caller runs this inside its transaction and decides the hold there when they reach the quorum.

    The hold's row lock (sql.LOCK_OPEN_HOLD) puts concurrent approvals and decisions of one hold in a
    line, so the count read after the insert is exact. Refusals: the hold is no longer open (409 as for a
    decision), or the actor already approved it (409 naming that approval)."""
    found = next(iter(gateway.fetch(sql.LOCK_OPEN_HOLD, [hold.pk])), None)
    if found is None or not found[1]:
        fresh = Hold.objects.get(pk=hold.pk)
        if fresh.status == Hold.Status.PENDING:
            fresh.status = Hold.Status.EXPIRED
        raise hold_refusal(fresh)
    mine = {"user": actor.user} if actor.kind == ActorKind.USER else {"account": actor.account}
    earlier = HoldApproval.objects.filter(hold_id=hold.pk, **mine).first()
    if earlier is not None:
        raise Conflict(
            f"you already approved this hold at {earlier.at.isoformat()}; an approval counts once",
            code="already_approved",
            approved_by=earlier.label,
            approved_at=earlier.at.isoformat(),
        )
    digest = decision_hash(decision)
    cleared = []
    if any(item.action == Action.EDIT for item in decision.items):
        # An edit is its author's approval of the edited data: approvals of other data no longer count.
        others = HoldApproval.objects.filter(hold_id=hold.pk).exclude(data_hash=digest)
        cleared = list(others.values_list("label", flat=True))
        others.delete()
    HoldApproval.objects.create(
        hold_id=hold.pk, label=actor.label, decision=decision.model_dump(), data_hash=digest, at=timezone.now(), **mine
    )
    approvals = list(HoldApproval.objects.filter(hold_id=hold.pk, data_hash=digest).order_by("at", "id"))
    AuditEvent.objects.create(
        kind=AuditKind.HOLD_APPROVED,
        actor=actor.label,
        run_id_ref=hold.run_id,
        hold_id_ref=hold.pk,
        data={"data_hash": digest, "approvals": len(approvals), "cleared": cleared},
    )
    return approvals


def state(hold: Hold, quorum: dict) -> dict:
    """Who approved and how many are still needed, for the API and the hold page."""
    approvals = list(HoldApproval.objects.filter(hold_id=hold.pk).order_by("at", "id"))
    by_data: dict[str, int] = {}
    for approval in approvals:
        by_data[approval.data_hash] = by_data.get(approval.data_hash, 0) + 1
    best = max(by_data.values(), default=0)
    return {
        "approvals": [approval_wire(a) for a in approvals],
        "needed": quorum["approvals"],
        "remaining": max(quorum["approvals"] - best, 0),
        "from": quorum["from"],
    }
