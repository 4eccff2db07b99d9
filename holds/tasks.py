"""Celery tasks: thin. Load by id, return early if done, call delivery or services.

This module also publishes outbox rows to the broker (the fast path; the database row is the truth,
and relay_due finds whatever a publish lost) and registers that with services.ports.
"""

import logging

from celery import shared_task
from django.conf import settings

from . import delivery, notify_tasks, services, task_messages
from .services import ports

log = logging.getLogger(__name__)

# Past this many, one message carries them all and a worker fans them out: a sweep of a thousand
# holds then spends its time expiring, not talking to the broker.
FAN_OUT_OVER = 20


def publish(invocation_ids: list[str]) -> list[str]:
    """Publishes deliveries; a publish that fails loses nothing (the relay finds every due row).
    Returns the ids it could not publish."""
    if len(invocation_ids) > FAN_OUT_OVER:
        try:
            deliver_many.delay(list(invocation_ids))
        except Exception:
            log.warning(
                "could not publish %d invocations; the relay will pick them up", len(invocation_ids), exc_info=True
            )
            return list(invocation_ids)
        return []
    lost = []
    send = _send_deliver()
    for invocation_id in invocation_ids:
        try:
            send(invocation_id)
        except Exception:
            log.warning("could not publish %s; the relay will pick it up", invocation_id, exc_info=True)
            lost.append(invocation_id)
    return lost


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver(invocation_id: str) -> str:
    return delivery.deliver(invocation_id)


@shared_task(ignore_result=True)
def deliver_many(invocation_ids: list[str]) -> int:
    """Fans a batch out into one deliver task each, so that deliveries run in parallel."""
    send = _send_deliver()
    for invocation_id in invocation_ids:
        send(invocation_id)
    return len(invocation_ids)


def _send_deliver():
    """How a deliver task is queued: task_messages' one LPUSH where it writes what delay() would (a
    quarter of its time), delay() elsewhere."""
    return task_messages.send_deliver if task_messages.applies() else deliver.delay


@shared_task(ignore_result=True)
def relay_due() -> int:
    """Publishes due outbox rows again: whatever the broker lost is found here. A row it published is
    published again only once its lease (RQ_RELAY_LEASE) has run out without a claim."""
    ids = services.invocations_relay()
    if lost := publish(ids):
        # The broker refused them: due again at the next tick, not only once their lease has run out.
        services.invocations_relay_release(invocation_ids=lost)
    return len(ids)


@shared_task(ignore_result=True)
def finish_experiments() -> int:
    """Beat: experiments whose runs have all finished (a run's own after-commit attempt can miss one)."""
    return len(services.experiments_finish())


@shared_task(ignore_result=True)
def sweep_expired(helper: bool = False) -> int:
    """Expires due holds, batch by batch, until none is left.

    A full first batch means a backlog (a long outage of beat, or many holds asked with the same
    expiry): the beat's sweep then asks RQ_SWEEPERS - 1 more workers to help. SKIP LOCKED keeps
    the sweepers off each other's holds. Helpers never ask for help, so one beat tick starts at
    most RQ_SWEEPERS sweeps.
    """
    total = 0
    while expired := services.holds_expire_due():
        if not total and not helper and expired >= settings.RQ_SWEEP_BATCH:
            for _ in range(settings.RQ_SWEEPERS - 1):
                sweep_expired.delay(helper=True)
        total += expired
    return total


ports.register(publish=publish, hold_asked=notify_tasks.hold_asked, endpoint_changed=notify_tasks.endpoint_changed)
