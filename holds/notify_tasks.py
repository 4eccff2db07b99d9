"""Celery tasks of issue 7: notifications, reminders and the ops rollup. Thin: they call
notifications.py and rollup.py. holds/tasks.py imports this module so that workers register them."""

import logging

from celery import shared_task
from django.conf import settings

from . import notifications, rollup

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=None)
def notify(self, hold_id: int, kind: str, channels: list[str] | None = None) -> dict:
    """One hold's notification on every channel (one broker message per ask). A channel that fails
    is retried with backoff, alone: the others are not sent again. Each failure is logged, and a
    channel is given up at the limit."""
    results, failed = {}, {}
    for channel in channels or notifications.CHANNELS:
        try:
            results[channel] = notifications.deliver(hold_id=hold_id, kind=kind, channel=channel)
        except Exception as exc:
            failed[channel] = exc
    if not failed:
        return results
    tries = self.request.retries + 1
    for channel, exc in failed.items():
        context = {"hold_id": hold_id, "notification": f"{kind}/{channel}", "attempt": tries}
        if tries > settings.RQ_NOTIFY_RETRIES:
            log.error("gave up the %s %s notification after %d tries: %s", kind, channel, tries, exc, extra=context)
            results[channel] = "failed"
        else:
            log.warning("the %s %s notification failed (try %d): %s", kind, channel, tries, exc, extra=context)
    if tries > settings.RQ_NOTIFY_RETRIES:
        return results
    countdown = min(settings.RQ_NOTIFY_BACKOFF * 2 ** (tries - 1), 3600)
    raise self.retry(args=(hold_id, kind, list(failed)), countdown=countdown) from None


@shared_task(ignore_result=True)
def remind_due() -> int:
    return notifications.enqueue_due()


@shared_task(ignore_result=True)
def ops_rollup() -> int:
    return rollup.rollup()


@shared_task(ignore_result=True)
def fold_pending() -> int:
    return rollup.fold_pending()
