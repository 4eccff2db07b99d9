"""Celery tasks: thin. Load by id, return early if done, call delivery or services."""

from celery import shared_task
from django.conf import settings

from . import delivery, outbox, services


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver(invocation_id: str) -> str:
    return delivery.deliver(invocation_id)


@shared_task(ignore_result=True)
def deliver_many(invocation_ids: list[str]) -> int:
    """Fans a batch out into one deliver task each, so that deliveries run in parallel."""
    for invocation_id in invocation_ids:
        deliver.delay(invocation_id)
    return len(invocation_ids)


@shared_task(ignore_result=True)
def relay_due() -> int:
    """Publishes every due outbox row again: whatever the broker lost is found here."""
    ids = services.invocations_due()
    outbox.publish(ids)
    return len(ids)


@shared_task(ignore_result=True)
def sweep_expired(helper: bool = False) -> int:
    """Expires due holds, batch by batch, until none is left.

    A full first batch means a backlog (a long outage of beat, or many holds asked with the same
    expiry): the beat's sweep then asks RQ_SWEEPERS - 1 more workers to help. SKIP LOCKED keeps
    the sweepers off each other's holds, and two sweepers expire about 1.4 times as many holds
    per second as one here (docs/benchmarks.md). Helpers never ask for help, so one beat tick
    starts at most RQ_SWEEPERS sweeps.
    """
    total = 0
    while expired := services.holds_expire_due():
        if not total and not helper and expired >= settings.RQ_SWEEP_BATCH:
            for _ in range(settings.RQ_SWEEPERS - 1):
                sweep_expired.delay(helper=True)
        total += expired
    return total


from . import notify_tasks  # noqa: E402, F401  (registers the tasks of issue 7 with the worker)
