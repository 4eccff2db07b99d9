"""Soft claims: "I'm on it" marks a pending hold as one person's for CLAIM_FOR, renewed while their
page stays open. A claim only informs: it never blocks a decision (hold_decide ignores it). Taking
and releasing are audited; renewals are not, and write at most once per RENEW_EVERY."""

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from ..auth import Actor
from ..errors import Conflict, NotFound
from ..ids import HOLD, public_id
from ..models import AuditEvent, AuditKind, Hold
from ..policy import hold_refusal, may_claim, may_release
from ..words import ActorKind
from .audit import audit

CLAIM_FOR = timedelta(minutes=15)
RENEW_EVERY = timedelta(minutes=1)


def _claimable(hold_id: int, actor: Actor) -> Hold:
    hold = Hold.objects.select_related("capability", "run", "claimed_by").filter(pk=hold_id).first()
    if hold is None:
        raise NotFound(f"hold {public_id(HOLD, hold_id)} does not exist")
    refusal = may_claim(actor, hold)
    if refusal is not None:
        raise refusal
    return hold


def hold_claim(*, hold_id: int, actor: Actor) -> Hold:
    """Takes (or re-takes) the soft claim for CLAIM_FOR: a conditional UPDATE that succeeds when
    the hold is pending and unclaimed, its claim ran out, or it is already this person's. Another
    person's live claim -> 409 claimed. Audited when it was not already this person's live claim."""
    hold = _claimable(hold_id, actor)
    user = actor.user
    mine = hold.claimed_by_id == user.pk and hold.claimed_until and hold.claimed_until > timezone.now()
    with transaction.atomic():
        taken = (
            Hold.objects.filter(pk=hold.pk, status=Hold.Status.PENDING)
            .filter(Q(claimed_by__isnull=True) | Q(claimed_until__lte=Now()) | Q(claimed_by=user))
            .update(claimed_by=user, claimed_until=Now() + CLAIM_FOR)
        )
        if not taken:
            fresh = Hold.objects.select_related("claimed_by").get(pk=hold.pk)
            if fresh.status != Hold.Status.PENDING:
                raise hold_refusal(fresh)
            name = fresh.claimed_by.get_username() if fresh.claimed_by else "someone"
            raise Conflict(f"{name} is on it already", code="claimed", claimed_by=name)
        if not mine:
            audit(AuditKind.HOLD_CLAIMED, actor, run_id=hold.run_id, hold_id=hold.pk, minutes=CLAIM_FOR.seconds // 60)
    return Hold.objects.select_related("claimed_by").get(pk=hold.pk)


def hold_claim_renew(*, hold_id: int, actor: Actor) -> bool:
    """Renews this person's live claim while their page is open: writes only when the last renewal
    is more than RENEW_EVERY old (the UPDATE's condition), so polling every few seconds costs one write
    a minute. Not audited. False: nothing to renew (not theirs, ran out, or renewed a moment ago)."""
    if actor.kind != ActorKind.USER:
        return False
    return bool(
        Hold.objects.filter(
            pk=hold_id,
            status=Hold.Status.PENDING,
            claimed_by=actor.user,
            claimed_until__gt=Now(),
            claimed_until__lte=Now() + (CLAIM_FOR - RENEW_EVERY),
        ).update(claimed_until=Now() + CLAIM_FOR)
    )


def hold_release(*, hold_id: int, actor: Actor) -> bool:
    """Gives up this person's claim (audited). False: it was not theirs (nothing changes)."""
    refusal = may_release(actor)
    if refusal is not None:
        raise refusal
    with transaction.atomic():
        hold = Hold.objects.filter(pk=hold_id).only("pk", "run_id").first()
        if hold is None:
            raise NotFound(f"hold {public_id(HOLD, hold_id)} does not exist")
        released = Hold.objects.filter(pk=hold_id, claimed_by=actor.user).update(claimed_by=None, claimed_until=None)
        if released:
            audit(AuditKind.HOLD_RELEASED, actor, run_id=hold.run_id, hold_id=hold.pk)
    return bool(released)


def hold_seen(*, hold_id: int, run_id: int, actor: Actor) -> bool:
    """Audits that a person who may decide had this hold open (its timeline's "seen"), once per person:
    safe to run twice (the second finds the first by the hold's audit index). Two at the same instant
    may both write; the timeline shows a person's first. The caller asks once per person and hold
    (presence.first_look), so this reads the database only then. False: seen already."""
    if AuditEvent.objects.filter(hold_id_ref=hold_id, kind=AuditKind.HOLD_SEEN, actor=actor.label).exists():
        return False
    audit(AuditKind.HOLD_SEEN, actor, run_id=run_id, hold_id=hold_id)
    return True
