"""Extending a pending hold's expiry, by someone who may decide it (SPEC "Expiry extension and reminders")."""

from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from ..auth import Actor
from ..config import REMIND_BEFORE
from ..errors import Invalid, NotFound
from ..ids import HOLD, public_id
from ..models import AuditKind, Hold, Notification
from ..policy import extend_refusal, may_extend
from ..schemas import validate_extend
from .audit import audit


def hold_extend(*, hold_id: int, actor: Actor, body) -> Hold:
    """Gives a pending hold that expires `expires_at = now() + expires_in`, with a reason, audited.

    One conditional UPDATE on `pending` and the database's `now() < expires_at`: the sweep takes due
    holds FOR UPDATE and re-checks them after the lock, so exactly one of the two wins a hold at its
    deadline. The reminder's rows go in the same transaction, so a deadline moved past the reminder's
    window is reminded again (once per window: not on every extension inside it).
    Checks in SPEC's order (404, 403, 409, 422). Safe to run twice: the second extends again.
    """
    hold = Hold.objects.select_related("capability", "run").filter(pk=hold_id).first()
    if hold is None:
        raise NotFound(f"hold {public_id(HOLD, hold_id)} does not exist")
    # The application's clock answers early; the conditional UPDATE tests the database's.
    refusal = may_extend(actor, hold)
    if refusal is not None:
        raise refusal
    extend, errors = validate_extend(body)
    if extend is None:
        raise Invalid(errors)
    if hold.expires_at is None:
        raise Invalid([{"field": "expires_in", "message": "this hold never expires; there is nothing to extend"}])
    new = Now() + timedelta(seconds=extend.expires_in)
    with transaction.atomic():
        extended = Hold.objects.filter(
            pk=hold.pk, status=Hold.Status.PENDING, expires_at__gt=Now(), expires_at__lte=new
        ).update(expires_at=new)
        if extended:
            fresh = Hold.objects.select_related("capability", "run").get(pk=hold.pk)
            # One reminder per window: an extension that leaves the hold inside its reminder window
            # keeps the reminder sent; one past the window re-arms it for the new deadline.
            window = hold.capability.remind_before or REMIND_BEFORE
            if fresh.expires_at > timezone.now() + window:
                Notification.objects.filter(hold=hold, kind=Notification.Kind.REMINDER).delete()
            audit(
                AuditKind.HOLD_EXTENDED,
                actor,
                run_id=hold.run_id,
                hold_id=hold.pk,
                expires_in=extend.expires_in,
                expires_at_before=hold.expires_at.isoformat(),
                expires_at=fresh.expires_at.isoformat(),
                reason=extend.reason.strip(),
            )
            return fresh
    fresh = Hold.objects.get(pk=hold.pk)
    # Expired by the database's clock (the one the UPDATE tested), swept or not.
    if fresh.status != Hold.Status.PENDING or not Hold.objects.filter(pk=hold.pk, expires_at__gt=Now()).exists():
        raise extend_refusal(fresh)
    raise Invalid(
        [{"field": "expires_in", "message": f"the hold already expires at {fresh.expires_at.isoformat()}, later"}]
    )
