"""What the Slack and Web Push channels write: a refused Slack interaction's audit event, a replay
guard row, the Slack message of a hold, a person's push subscriptions. Deciding is hold_decide's."""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import ratelimit
from ..models import AuditEvent, AuditKind, PushSubscription, SlackMessage, SlackRequest
from ..words import SlackRequestRefusal

REPLAY_WINDOW = timedelta(minutes=5)
REFUSALS_WINDOW = 60  # seconds: requests refused before they are known to be Slack's, counted per minute


def slack_refused(*, slack_user: str, reason: str, hold_id: int | None = None, person: str = "") -> AuditEvent:
    """One refused Slack interaction, audited with who asked (the Slack user, and the person mapped to
    them if any) and why."""
    label = f"slack:{slack_user}" + (f" ({person})" if person else "")
    return AuditEvent.objects.create(
        kind=AuditKind.SLACK_REFUSED, actor=label[:200], hold_id_ref=hold_id, data={"reason": reason}
    )


def slack_request_refused(*, reason: SlackRequestRefusal) -> AuditEvent | None:
    """A request refused before anyone is known to have sent it: unsigned, stale, forged or replayed.
    Anyone who can reach the endpoint can send these, so they are audited bounded: the 1st, 10th,
    100th... refusal for each reason in each minute writes one event carrying that count, so a flood of
    N a minute writes about log10(N) + 1 events a minute. The count is the cache's (as rate limits');
    while it is unavailable they are only logged, by the endpoint."""
    count = ratelimit.tally("slack_refused", reason, REFUSALS_WINDOW)
    if count is None or str(count) != "1" + "0" * (len(str(count)) - 1):
        return None
    return AuditEvent.objects.create(
        kind=AuditKind.SLACK_REFUSED, actor="slack:?", data={"reason": str(reason), "count_this_minute": count}
    )


def slack_request_seen(signature: str) -> bool:
    """Records a verified request by its signature; True when it was seen before (a replay). Rows
    older than the signature window can never match a valid request again and are pruned here."""
    now = timezone.now()
    try:
        with transaction.atomic():
            SlackRequest.objects.create(signature=signature)
    except IntegrityError:
        return True
    SlackRequest.objects.filter(received_at__lt=now - 2 * REPLAY_WINDOW).delete()
    return False


def slack_message_posted(*, hold_id: int, channel: str, ts: str) -> None:
    SlackMessage.objects.update_or_create(hold_id=hold_id, defaults={"channel": channel, "ts": ts})


def slack_message_closed(message: SlackMessage) -> None:
    SlackMessage.objects.filter(pk=message.pk).update(closed_at=timezone.now())


def push_subscribe(*, user, endpoint: str, p256dh: str, auth: str) -> PushSubscription:
    """A browser's subscription, for this person (a browser that re-subscribes moves to its new owner)."""
    row, _ = PushSubscription.objects.update_or_create(
        endpoint=endpoint, defaults={"user": user, "p256dh": p256dh, "auth": auth}
    )
    return row


def push_unsubscribe(*, user, endpoint: str) -> int:
    return PushSubscription.objects.filter(user=user, endpoint=endpoint).delete()[0]


def push_gone(subscription_id: int) -> None:
    """The push service answered 404/410: the subscription is dead."""
    PushSubscription.objects.filter(pk=subscription_id).delete()
