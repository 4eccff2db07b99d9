"""Celery tasks of issue 7: notifications, reminders and the ops rollup. Thin: they call
notifications.py and ops.py. holds/tasks.py imports this module so that workers register them."""

import logging

from celery import shared_task
from django.conf import settings

from . import notifications, ops

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=None)
def notify(self, hold_id: int, kind: str, channel: str) -> str:
    """One notification; on failure retried with backoff, logged each time, given up at the limit."""
    try:
        return notifications.deliver(hold_id=hold_id, kind=kind, channel=channel)
    except Exception as exc:
        tries = self.request.retries + 1
        context = {"hold_id": hold_id, "notification": f"{kind}/{channel}", "attempt": tries}
        if tries > settings.RQ_NOTIFY_RETRIES:
            log.error("gave up the %s %s notification after %d tries: %s", kind, channel, tries, exc, extra=context)
            return "failed"
        countdown = min(settings.RQ_NOTIFY_BACKOFF * 2 ** (tries - 1), 3600)
        log.warning(
            "the %s %s notification failed (try %d), again in %ss: %s",
            kind,
            channel,
            tries,
            countdown,
            exc,
            extra=context,
        )
        raise self.retry(exc=exc, countdown=countdown) from None


@shared_task(ignore_result=True)
def remind_due() -> int:
    return notifications.enqueue_due()


@shared_task(ignore_result=True)
def ops_rollup() -> int:
    return ops.rollup()
