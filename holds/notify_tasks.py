"""Celery tasks of notifications, reminders and the ops rollup. Thin: they call notifications.py and
rollup.py. holds/tasks.py imports this module so that workers register them."""

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.core import mail

from . import notifications, rollup, services, slack
from .models import Hold, Notification

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=None)
def notify(self, hold_id: int, kind: str, channels: list[str] | None = None) -> dict:
    """One hold's notification on every channel (one broker message per ask)."""
    return _each_channel(
        self,
        channels or notifications.CHANNELS,
        lambda channel: notifications.deliver(hold_id=hold_id, kind=kind, channel=channel),
        kind=kind,
        context={"hold_id": hold_id},
        retry_args=(hold_id, kind),
    )


def _each_channel(task, channels, send, *, kind: str, context: dict, retry_args: tuple) -> dict:
    """Sends on every channel. A channel that fails is retried with backoff, alone: the others are not
    sent again. Each failure is logged, and a channel is given up at the limit."""
    results, failed = {}, {}
    for channel in channels:
        try:
            results[channel] = send(channel)
        except Exception as exc:
            failed[channel] = exc
    if not failed:
        return results
    tries = task.request.retries + 1
    for channel, exc in failed.items():
        extra = {**context, "notification": f"{kind}/{channel}", "attempt": tries}
        if tries > settings.RQ_NOTIFY_RETRIES:
            log.error("gave up the %s %s notification after %d tries: %s", kind, channel, tries, exc, extra=extra)
            results[channel] = "failed"
        else:
            log.warning("the %s %s notification failed (try %d): %s", kind, channel, tries, exc, extra=extra)
    if tries > settings.RQ_NOTIFY_RETRIES:
        return results
    countdown = min(settings.RQ_NOTIFY_BACKOFF * 2 ** (tries - 1), 3600)
    raise task.retry(args=(*retry_args, list(failed)), countdown=countdown) from None


ENDPOINT_CHANNELS = (Notification.Channel.EMAIL, Notification.Channel.WEBHOOK, Notification.Channel.SLACK)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=None)
def notify_endpoint(self, capability_id: int, kind: str, spell: str, channels: list[str] | None = None) -> dict:
    """Admins hear that a capability's endpoint is failing or answers again; retried per channel like
    notify, on the same Notification rows (one per failing spell, kind and channel)."""
    when = datetime.fromisoformat(spell)
    return _each_channel(
        self,
        channels or ENDPOINT_CHANNELS,
        lambda channel: notifications.deliver_endpoint(
            capability_id=capability_id, kind=kind, spell=when, channel=channel
        ),
        kind=f"endpoint {kind}",
        context={"capability_id": capability_id},
        retry_args=(capability_id, kind, spell),
    )


def endpoint_changed(capability_id: int, kind: str, spell: datetime) -> None:
    """A capability's endpoint became failing, or answers again (after the commit, through
    services.ports); never raises into the caller."""
    try:
        notify_endpoint.delay(capability_id, kind, spell.isoformat())
    except Exception:
        log.warning("could not enqueue the endpoint %s notification", kind, extra={"capability_id": capability_id})


def enqueue(hold_id: int, kind: str) -> None:
    """Publishes one hold's notification; never raises into the caller."""
    try:
        notify.delay(hold_id, kind)
    except Exception:
        # The broker is down: beat's catch-up (or the next reminder pass) sends it later.
        log.warning("could not enqueue the %s notification", kind, extra={"hold_id": hold_id})


def hold_asked(hold_id: int) -> None:
    """A run is held on its pending hold (after the commit, through services.ports)."""
    enqueue(hold_id, Notification.Kind.ASKED)


@shared_task(ignore_result=True)
def remind_due(now=None) -> int:
    """Beat: reminders, and the asks whose notification was lost. Returns holds enqueued."""
    count = 0
    for kind, hold_ids in notifications.due(now=now):
        for hold_id in hold_ids:
            enqueue(hold_id, kind)
            count += 1
    return count


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=3)
def slack_decide(self, slack_user: str, channel: str, action: str, hold_ref: str) -> str:
    """A verified Slack button press, decided after the interaction was acknowledged (Slack wants an
    answer within 3 s). A retry after the decision finds the hold decided and decides nothing."""
    try:
        return slack.decide(slack_user=slack_user, channel=channel, action=action, hold_ref=hold_ref)
    except Exception as exc:
        log.warning("the Slack decision of %s failed: %s", hold_ref, exc)
        raise self.retry(countdown=5) from None


@shared_task(ignore_result=True)
def close_slack() -> int:
    """Beat: Slack messages of holds closed anywhere lose their buttons (chat.update)."""
    return slack.close_due()


@shared_task(ignore_result=True)
def escalate_due(now=None) -> int:
    """Beat: takes each due escalation step once (services.escalation_take's unique row) and tells whom
    it names; an `expire` step is followed by a sweep batch. Returns the steps taken."""
    taken = 0
    expired = False
    for hold_id, step in services.due_steps(now):
        took = services.escalation_take(hold_id=hold_id, step=step, now=now)
        if took is None:
            continue
        taken += 1
        expired |= took.expire
        if took.recipients:
            hold = Hold.objects.select_related("capability").get(pk=hold_id)
            try:
                mail.mailers.default.send_messages(notifications.escalation_messages(hold, step, took.recipients))
            except Exception:
                log.exception("the escalation of a hold could not be sent", extra={"hold_id": hold_id})
    if expired:
        services.holds_expire_due()
    return taken


@shared_task(ignore_result=True)
def ops_rollup() -> int:
    return rollup.rollup()


@shared_task(ignore_result=True)
def fold_pending() -> int:
    return rollup.fold_pending()
