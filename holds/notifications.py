"""Telling reviewers about holds: a new hold, and one reminder before it expires.

Everything here runs as Celery tasks after the ask commits, so a slow mail server or a dead webhook
never delays or fails an ask. A message carries the intent, the capability and a link to the hold
page, never the items' data: a reviewer sees data only after signing in. The link only opens the
page (a GET decides nothing), so mail scanners that prefetch links change nothing.

Each (hold, kind, channel) has one Notification row, which is the claim: a retried or duplicated
task sends nothing twice once the row says sent. Beat also finds holds whose on-commit enqueue was
lost (the broker was down) and holds due a reminder.

Admins also hear, on the same rows, when a capability's endpoint becomes failing and when it answers
again: one row per (capability, failing spell, kind, channel), the spell named by the time its first
failure was counted (services.delivery enqueues them).
"""

import logging
from datetime import timedelta

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.db.models import DateTimeField, F, Max, Q, Value
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from . import push, slack
from .config import REMIND_BEFORE, REMIND_MIN_LIFE
from .messages import hold_url, one_line, slack_escape
from .models import Capability, Hold, Notification, Role
from .policy import acting_for, deciders_of

log = logging.getLogger(__name__)

CHANNELS = tuple(Notification.Channel)
CLAIM_FOR = timedelta(minutes=2)
# A hold's on-commit enqueue gets this long before beat's catch-up sends for it instead.
CATCH_UP_AFTER = timedelta(minutes=1)
CATCH_UP_WINDOW = timedelta(minutes=30)


class Busy(Exception):
    """Another worker holds the claim of this notification; try again after it runs out."""


# --- what is due ---------------------------------------------------------------------------------


def due(*, now=None) -> list[tuple[str, list[int]]]:
    """Beat's pass: holds due a reminder, and new holds whose enqueue was lost, by notification kind.

    A capability's `remind_before` reminds once when a hold's time left falls below it (a hold asked
    with less time left than that never was above it); without it, holds that lived REMIND_MIN_LIFE
    are reminded REMIND_BEFORE ahead. An extension past the window deletes the reminder's rows,
    which re-arms it (services.hold_extend).
    """
    now = now or timezone.now()
    pending = Hold.objects.filter(status=Hold.Status.PENDING)
    longest = Capability.objects.aggregate(longest=Max("remind_before"))["longest"] or REMIND_BEFORE
    # Walks the pending-and-expiring partial index (hold_sweep_due) up to the longest window.
    remind = (
        pending.filter(expires_at__gt=now, expires_at__lte=now + max(longest, REMIND_BEFORE))
        .filter(
            Q(
                capability__remind_before__isnull=True,
                expires_at__lte=now + REMIND_BEFORE,
                expires_at__gte=F("created_at") + REMIND_MIN_LIFE,
            )
            | Q(
                capability__remind_before__isnull=False,
                expires_at__lte=Value(now, output_field=DateTimeField()) + F("capability__remind_before"),
                expires_at__gt=F("created_at") + F("capability__remind_before"),
            )
        )
        .exclude(notifications__kind=Notification.Kind.REMINDER)
        .values_list("pk", flat=True)[:500]
    )
    missed = (
        pending.filter(created_at__gte=now - CATCH_UP_WINDOW, created_at__lte=now - CATCH_UP_AFTER)
        .exclude(notifications__kind=Notification.Kind.ASKED)
        .values_list("pk", flat=True)[:500]
    )
    return [(Notification.Kind.REMINDER, list(remind)), (Notification.Kind.ASKED, list(missed))]


# --- sending --------------------------------------------------------------------------------------


def approver_emails(hold: Hold) -> list[str]:
    """The addresses of the people who may decide this hold (policy.deciders_of): whoever started its
    run, or any run above it, is left out when `self_approval: false`. Someone out of office is replaced
    by their delegate (policy.acting_for)."""
    people = deciders_of(hold).select_related("membership__delegate")
    told = acting_for(list(people), timezone.now())
    return sorted({person.email for person, _ in told if person.email})


def escalation_messages(hold: Hold, step: int, recipients: list) -> list[mail.EmailMessage]:
    """One message per person an escalation step tells (with "acting for" when they stand in)."""
    waited = timedelta(seconds=hold.capability.escalate[step - 1]["after"])
    messages = []
    for person, for_whom in recipients:
        if not person.email:
            continue
        body = render_to_string(
            "holds/email/hold.txt",
            {
                "escalation": step,
                "waited": _duration_words(waited),
                "acting_for": for_whom.username if for_whom else "",
                "intent": one_line(hold.intent, 500),
                "capability": hold.capability.name,
                "hold_id": hold.public_id,
                "item_count": hold.item_count,
                "expires_at": hold.expires_at,
                "url": hold_url(hold),
            },
        )
        lead = f"Escalated{f' (acting for {for_whom.username})' if for_whom else ''}"
        subject = f"{lead}: {one_line(hold.intent, 120)}"
        messages.append(
            mail.EmailMessage(subject=subject, body=body, from_email=settings.RQ_NOTIFY_FROM, to=[person.email])
        )
    return messages


def _duration_words(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def left_words(hold: Hold) -> str:
    """The reminder's "under an hour", or under the capability's remind_before."""
    window = hold.capability.remind_before or REMIND_BEFORE
    seconds = int(window.total_seconds())
    if seconds == 3600:
        return "an hour"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def lead_line(hold: Hold, kind: str) -> str:
    return f"Reminder, under {left_words(hold)} left" if kind == Notification.Kind.REMINDER else "Review needed"


def email_message(hold: Hold, kind: str, to: str) -> mail.EmailMessage:
    reminder = kind == Notification.Kind.REMINDER
    lead = lead_line(hold, kind)
    body = render_to_string(
        "holds/email/hold.txt",
        {
            "reminder": reminder,
            "left": left_words(hold),
            "intent": one_line(hold.intent, 500),
            "capability": hold.capability.name,
            "hold_id": hold.public_id,
            "item_count": hold.item_count,
            "expires_at": hold.expires_at,
            "url": hold_url(hold),
        },
    )
    subject = f"{lead}: {one_line(hold.intent, 120)}"
    return mail.EmailMessage(subject=subject, body=body, from_email=settings.RQ_NOTIFY_FROM, to=[to])


def webhook_payload(hold: Hold, kind: str) -> dict:
    """A Slack-compatible message (text + blocks); Mattermost and others read `text`."""
    intent = slack_escape(one_line(hold.intent, 500))
    capability = slack_escape(hold.capability.name)
    url = hold_url(hold)
    lead = lead_line(hold, kind)
    text = f"{lead}: {intent} ({capability}) <{url}|Open {hold.public_id}>"
    expires = f"expires {hold.expires_at:%Y-%m-%d %H:%M} UTC" if hold.expires_at else "no expiry"
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{lead}* · `{capability}`\n{intent}"}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"<{url}|Open {hold.public_id}> · {hold.item_count} item(s) · {expires}",
                    }
                ],
            },
        ],
    }


def _claim(hold: Hold, kind: str, channel: str) -> Notification | None:
    return _claim_row(f"{hold.public_id} {kind} {channel}", hold=hold, kind=kind, channel=channel)


def _claim_row(label: str, **key) -> Notification | None:
    """The notification row of this key, claimed for this worker; None when it was sent already."""
    now = timezone.now()
    row, _ = Notification.objects.get_or_create(**key)
    if row.sent_at is not None:
        return None
    won = (
        Notification.objects.filter(pk=row.pk, sent_at__isnull=True)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + CLAIM_FOR, attempts=F("attempts") + 1)
    )
    if won != 1:
        if Notification.objects.filter(pk=row.pk, sent_at__isnull=False).exists():
            return None
        raise Busy(f"{label} is being sent by another worker")
    return row


def deliver(*, hold_id: int, kind: str, channel: str) -> str:
    """Sends one notification if it is still due. Raises on a failure so that the task retries."""
    hold = Hold.objects.select_related("capability", "run").filter(pk=hold_id).first()
    if hold is None:
        return "gone"
    if hold.status != Hold.Status.PENDING:
        return "not-pending"  # decided or expired already: nobody needs to hear about it
    notify = hold.capability.notify if isinstance(hold.capability.notify, dict) else {}
    if (channel == Notification.Channel.SLACK and not slack.configured()) or (
        channel == Notification.Channel.PUSH and not push.configured()
    ):
        return "off"  # not set up on this server: no row for every hold
    row = _claim(hold, kind, channel)
    if row is None:
        return "already-sent"
    try:
        if channel == Notification.Channel.EMAIL:
            recipients = approver_emails(hold) if notify.get("email", True) else []
            if not recipients:
                return _done(row, "skipped: email is off or no approver has an address")
            mail.mailers.default.send_messages([email_message(hold, kind, to) for to in recipients])
            result = f"sent to {len(recipients)}"
        elif channel == Notification.Channel.WEBHOOK:
            url = notify.get("webhook")
            if not url:
                return _done(row, "skipped: no webhook")
            result = _post_webhook(url, webhook_payload(hold, kind))
        elif channel == Notification.Channel.SLACK:
            target = notify.get("slack")
            if not target:
                return _done(row, "skipped: the capability names no Slack channel")
            if kind != Notification.Kind.ASKED:
                return _done(row, "skipped: the Slack message of the hold is updated in place, not repeated")
            result = slack.post(hold, target)
        else:
            if kind != Notification.Kind.ASKED or not notify.get("push", True):
                return _done(row, "skipped: Web Push announces new holds only, where the capability allows it")
            result = push.send(hold, deciders_of(hold))
    except Exception as exc:
        _failed(row, exc)
        raise
    return _done(row, "", result)


def _failed(row: Notification, exc: Exception) -> None:
    Notification.objects.filter(pk=row.pk).update(claimed_until=None, last_error=f"{exc}"[:500])


def _post_webhook(url: str, payload: dict) -> str:
    response = httpx.post(
        url,
        json=payload,
        timeout=settings.RQ_WEBHOOK_TIMEOUT,
        headers={"user-agent": "ReviewQueue/0"},
        follow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise httpx.HTTPStatusError(
            f"the webhook answered HTTP {response.status_code}", request=response.request, response=response
        )
    return "posted"


def _done(row: Notification, note: str, result: str | None = None) -> str:
    Notification.objects.filter(pk=row.pk).update(sent_at=timezone.now(), claimed_until=None, last_error=note)
    return result or note


# --- a capability's failing endpoint, for admins ----------------------------------------------------


def admin_emails() -> list[str]:
    """Every active admin (an admin membership, or a superuser) with an address; members are not told."""
    people = get_user_model().objects.filter(is_active=True).exclude(email="")
    admins = people.filter(Q(is_superuser=True) | Q(membership__role=Role.ADMIN))
    return sorted(set(admins.values_list("email", flat=True)))


def endpoint_line(capability: Capability, kind: str) -> str:
    if kind == Notification.Kind.ENDPOINT_FAILING:
        return f"Endpoint failing: {capability.name}"
    return f"Endpoint answering again: {capability.name}"


def deliver_endpoint(*, capability_id: int, kind: str, spell, channel: str) -> str:
    """Tells admins that a capability's endpoint became failing, or answers again after a failing spell
    they were told about. Raises on a failure so that the task retries."""
    capability = Capability.objects.filter(pk=capability_id).first()
    if capability is None:
        return "gone"
    if kind == Notification.Kind.ENDPOINT_FAILING and capability.endpoint_failing_since != spell:
        return "over"  # it answered before this was sent: the spell is over, nobody needs to hear of it
    if channel == Notification.Channel.PUSH or (channel == Notification.Channel.SLACK and not slack.configured()):
        return "off"  # Web Push is for reviewers' new holds; no row for a channel that is not set up
    notify = capability.notify if isinstance(capability.notify, dict) else {}
    label = f"capability {capability.name} {kind} {channel}"
    row = _claim_row(label, capability=capability, spell=spell, kind=kind, channel=channel)
    if row is None:
        return "already-sent"
    line = endpoint_line(capability, kind)
    url = settings.RQ_PUBLIC_URL + reverse("ops")
    try:
        if channel == Notification.Channel.EMAIL:
            recipients = admin_emails()
            if not recipients:
                return _done(row, "skipped: no active admin has an address")
            body = render_to_string(
                "holds/email/endpoint.txt",
                {
                    "failing": kind == Notification.Kind.ENDPOINT_FAILING,
                    "capability": capability.name,
                    "failures": capability.endpoint_failures,
                    "since": spell,
                    "url": url,
                },
            )
            messages = [
                mail.EmailMessage(subject=line, body=body, from_email=settings.RQ_NOTIFY_FROM, to=[to])
                for to in recipients
            ]
            mail.mailers.default.send_messages(messages)
            result = f"sent to {len(recipients)}"
        elif channel == Notification.Channel.WEBHOOK:
            if not notify.get("webhook"):
                return _done(row, "skipped: no webhook")
            result = _post_webhook(notify["webhook"], {"text": f"{slack_escape(line)} <{url}|Ops>"})
        else:
            if not notify.get("slack"):
                return _done(row, "skipped: the capability names no Slack channel")
            text = f"{slack_escape(line)} <{url}|Ops>"
            slack.client().chat_postMessage(channel=notify["slack"], text=text, unfurl_links=False)
            result = "posted"
    except Exception as exc:
        _failed(row, exc)
        raise
    return _done(row, "", result)
