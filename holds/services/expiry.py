"""Expiry: the sweep moves due pending holds to expired, each with its resume."""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ..auth import SYSTEM, run_token_sql_params
from ..models import Hold, Invocation
from . import gateway, ports, sql

log = logging.getLogger(__name__)


def due_holds():
    """Pending holds past their expiry, soonest first (the partial index hold_sweep_due)."""
    return Hold.objects.filter(status=Hold.Status.PENDING, expires_at__lte=Now()).order_by("expires_at")


@dataclass(frozen=True)
class Expired:
    """A hold that a sweep batch expired, and the resume it wrote for it."""

    hold_id: int
    capability_id: int
    invocation_id: str
    status: str  # of the resume: pending, or waiting while the asker is still answering


def holds_expire_due(*, limit: int | None = None) -> int:
    """One sweep batch; returns how many holds it expired (0: nothing is due)."""
    return len(holds_expire_batch(limit=limit))


def holds_expire_batch(*, limit: int | None = None) -> list[Expired]:
    """One sweep batch: due pending holds become expired, each with its resume, in one transaction.

    Rows are claimed with FOR UPDATE SKIP LOCKED and the UPDATE re-checks `pending`, so two sweepers
    or a sweeper and a person never both win a hold. A hold whose asker is recording its answer right
    now is locked by that answer, skipped, and swept next time; otherwise the answer waits for this
    commit and then sees the resume it must release. Safe to run twice or concurrently.

    A batch that fails is expired again hold by hold, so that one bad row never stops the others: the
    bad one is logged and left pending (it is tried again next sweep).
    """
    limit = limit or settings.RQ_SWEEP_BATCH
    try:
        with transaction.atomic():
            return _expire(list(due_holds().select_for_update(skip_locked=True).values_list("pk", flat=True)[:limit]))
    except DatabaseError:
        log.exception("a sweep batch failed; expiring its holds one by one")
    expired = []
    for hold_id in due_holds().values_list("pk", flat=True)[:limit]:
        try:
            with transaction.atomic():
                locked = due_holds().filter(pk=hold_id).select_for_update(skip_locked=True).values_list("pk", flat=True)
                expired += _expire(list(locked))
        except DatabaseError:
            log.exception("hold h_%s could not be expired; the sweep goes on without it", hold_id)
    return expired


def _expire(hold_ids: list[int]) -> list[Expired]:
    """Expires these locked holds (sql.EXPIRE_LOCKED) in the caller's transaction.

    The writes are a second statement, not part of the locking one: a statement reads with the snapshot
    it started with, and the askers' statuses must be read after the locks are held. An answer that
    committed between that start and the lock on its hold would otherwise look still in flight, and the
    resume would wait for an answer that has already come.
    """
    if not hold_ids:
        return []
    params = {"hold_ids": hold_ids, "now": timezone.now(), "actor": SYSTEM.label, **run_token_sql_params()}
    expired = [Expired(*row) for row in gateway.fetch(sql.EXPIRE_LOCKED, params)]
    ports.publish_on_commit([e.invocation_id for e in expired if e.status == Invocation.Status.PENDING])
    return expired
