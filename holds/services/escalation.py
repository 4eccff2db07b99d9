"""Escalation (SPEC "Escalation and delegation"): a hold still pending `after` its creation takes each
of its capability's `escalate` steps once; the last step may expire it early.

Each step's claim is a unique (hold, step) row inserted with ON CONFLICT DO NOTHING, so two beats or
two workers take a step once. The notifying itself happens after the commit (notify_tasks), to whom
`notified` names; a step whose message then fails is not sent again (at most once, like its audit).
"""

import json
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Least, Now
from django.utils import timezone

from ..auth import SYSTEM
from ..models import AuditEvent, AuditKind, Capability, Hold, HoldEscalation
from ..policy import acting_for, escalation_people
from . import gateway, sql


@dataclass(frozen=True)
class Taken:
    """A step this worker took: whom to tell (user, acting for) — none for an `expire` step."""

    hold_id: int
    step: int
    recipients: list
    expire: bool


def due_steps(now=None, limit: int = 500) -> list[tuple[int, int]]:
    """(hold id, 1-based step) for pending holds of capabilities with `escalate` whose step is due and not
    taken yet, oldest hold first."""
    now = now or timezone.now()
    due = []
    for capability in Capability.objects.filter(escalate__isnull=False).only("pk", "escalate"):
        steps = capability.escalate or []
        first = min(step["after"] for step in steps)
        holds = (
            Hold.objects.filter(
                capability_id=capability.pk, status=Hold.Status.PENDING, created_at__lte=now - timedelta(seconds=first)
            )
            .order_by("created_at")
            .values_list("pk", "created_at")[:limit]
        )
        taken = set(HoldEscalation.objects.filter(hold_id__in=[pk for pk, _ in holds]).values_list("hold_id", "step"))
        for pk, created_at in holds:
            for n, step in enumerate(steps, start=1):
                if created_at + timedelta(seconds=step["after"]) <= now and (pk, n) not in taken:
                    due.append((pk, n))
    return due[:limit]


def escalation_take(*, hold_id: int, step: int, now=None) -> Taken | None:
    """Takes one step for one hold, once: None when another worker took it, the hold is no longer
    pending, or the capability no longer has that step. An `expire` step moves the hold's expiry to the
    database's now (the sweep then expires it with its resume, as any expiry)."""
    now = now or timezone.now()
    with transaction.atomic():
        hold = Hold.objects.select_related("capability").filter(pk=hold_id, status=Hold.Status.PENDING).first()
        steps = (hold.capability.escalate or []) if hold is not None else []
        if hold is None or not 1 <= step <= len(steps):
            return None
        config = steps[step - 1]
        expire = bool(config.get("expire"))
        recipients = [] if expire else acting_for(list(escalation_people(hold, config["notify"])), now)
        notified = ["expire"] if expire else [_label(told, for_whom) for told, for_whom in recipients]
        if not gateway.fetch(sql.TAKE_ESCALATION_STEP, [hold.pk, step, json.dumps(notified), now]):
            return None
        if expire:
            # By the database's clock, as the sweep reads it; an earlier expiry stays.
            Hold.objects.filter(pk=hold.pk, status=Hold.Status.PENDING).update(expires_at=Least("expires_at", Now()))
        AuditEvent.objects.create(
            kind=AuditKind.HOLD_ESCALATED,
            actor=SYSTEM.label,
            run_id_ref=hold.run_id,
            hold_id_ref=hold.pk,
            data={"step": step, "notified": notified},
        )
    return Taken(hold.pk, step, recipients, expire)


def _label(told, for_whom) -> str:
    return f"{told.username} acting for {for_whom.username}" if for_whom else told.username
