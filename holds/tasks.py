"""Celery tasks: thin. Load by id, return early if done, call delivery or services."""

from celery import shared_task

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
def sweep_expired() -> int:
    total = 0
    while True:
        expired = services.holds_expire_due()
        total += expired
        if expired == 0:
            return total


from . import notify_tasks  # noqa: E402, F401  (registers the tasks of issue 7 with the worker)
