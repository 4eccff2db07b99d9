"""Slack: a hold's message with buttons, the decision a button asks for, and the update in place.

The message carries the intent, item titles, the lowest confidence, text flags and the expiry, with
Approve all / Reject buttons whose values name the hold (never a URL that decides) and an Open link
button to the hold page. A press is verified and acknowledged by web/slack.py; `decide` runs after,
as a task: it maps the Slack user to a person (an explicit SlackLink, else Slack's confirmed e-mail
address), and decides through services.hold_decide, the browser's call, so policy.py alone says who
may and a second press finds the hold decided. Once a hold is closed by anyone anywhere, `close`
replaces the message with the outcome and no buttons (beat finds them; a Slack decision closes its
own at once).
"""

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from . import services
from .auth import actor_for_user
from .errors import ServiceError
from .ids import HOLD, parse_public_id
from .messages import hold_url, one_line, slack_escape
from .models import Hold, HoldItem, SlackLink, SlackMessage
from .rendering import text_flags
from .words import Action

log = logging.getLogger(__name__)

APPROVE, REJECT, OPEN = "rq_approve_all", "rq_reject", "rq_open"
SHOWN_ITEMS = 10


def configured() -> bool:
    return bool(settings.RQ_SLACK_BOT_TOKEN)


def client() -> WebClient:
    return WebClient(
        token=settings.RQ_SLACK_BOT_TOKEN,
        base_url=settings.RQ_SLACK_API_URL,
        timeout=int(settings.RQ_WEBHOOK_TIMEOUT),
    )


# --- the message ---------------------------------------------------------------------------------


def _summary(hold: Hold, items: list[HoldItem]) -> list[dict]:
    intent = slack_escape(one_line(hold.intent, 500))
    capability = slack_escape(hold.capability.name)
    lines = [f"• {slack_escape(one_line(item.title, 150))}" for item in items[:SHOWN_ITEMS]]
    if len(items) > SHOWN_ITEMS:
        lines.append(f"… and {len(items) - SHOWN_ITEMS} more")
    flags = sorted({flag for text in [hold.intent, *(i.title for i in items)] for flag in text_flags(text)})
    facts = [f"{hold.item_count} item(s)"]
    if hold.min_confidence is not None:
        facts.append(f"lowest confidence {hold.min_confidence:.2f}")
    facts.append(f"expires {hold.expires_at:%Y-%m-%d %H:%M} UTC" if hold.expires_at else "no expiry")
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Review needed* · `{capability}`\n{intent}"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]},
    ]
    if flags:
        warning = "⚠ " + slack_escape("; ".join(flags)) + ": open the hold page to see the text exactly"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": warning}]})
    return blocks


def hold_message(hold: Hold) -> tuple[str, list[dict]]:
    """The message of a pending hold: its summary and the three buttons."""
    items = list(hold.items.order_by("position"))
    buttons = [
        {"type": "button", "action_id": APPROVE, "style": "primary", "value": hold.public_id,
         "text": {"type": "plain_text", "text": "Approve all"}},
        {"type": "button", "action_id": REJECT, "style": "danger", "value": hold.public_id,
         "text": {"type": "plain_text", "text": "Reject"}},
        {"type": "button", "action_id": OPEN, "url": hold_url(hold),
         "text": {"type": "plain_text", "text": "Open (edit or comment)"}},
    ]  # fmt: skip
    blocks = [*_summary(hold, items), {"type": "actions", "block_id": "rq_decide", "elements": buttons}]
    return f"Review needed: {one_line(hold.intent, 150)}", blocks


def outcome_line(hold: Hold) -> str:
    if hold.status == Hold.Status.DECIDED:
        actions = sorted(set(hold.items.values_list("action", flat=True)))
        return f"Decided ({', '.join(actions)}) by {hold.decided_by} at {hold.decided_at:%Y-%m-%d %H:%M} UTC"
    if hold.status == Hold.Status.CANCELLED:
        return "Cancelled: its run finished"
    return "Expired before it was decided"


def closed_message(hold: Hold) -> tuple[str, list[dict]]:
    """The message once the hold is closed: the same summary, the outcome, a link, no buttons."""
    items = list(hold.items.order_by("position"))
    outcome = slack_escape(outcome_line(hold))
    blocks = [
        *_summary(hold, items),
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{outcome}* · <{hold_url(hold)}|Open>"}},
    ]
    return f"{outcome}: {one_line(hold.intent, 150)}", blocks


def post(hold: Hold, channel: str) -> str:
    """Posts a new hold's message (notifications.deliver calls this once per hold) and keeps its ts."""
    text, blocks = hold_message(hold)
    answer = client().chat_postMessage(channel=channel, text=text, blocks=blocks, unfurl_links=False)
    services.slack_message_posted(hold_id=hold.pk, channel=answer["channel"], ts=answer["ts"])
    return "posted"


def close(message: SlackMessage) -> None:
    """Replaces a closed hold's message with its outcome, buttons removed (chat.update)."""
    hold = Hold.objects.select_related("capability").get(pk=message.hold_id)
    text, blocks = closed_message(hold)
    client().chat_update(channel=message.channel, ts=message.ts, text=text, blocks=blocks)
    services.slack_message_closed(message)


def close_due(limit: int = 200) -> int:
    """Beat's pass: messages of holds that closed anywhere (decided on the page, by the API, expired,
    cancelled) and still show buttons. A hold past its expiry is closed once the sweep expires it."""
    due = SlackMessage.objects.filter(closed_at__isnull=True).exclude(hold__status=Hold.Status.PENDING)
    done = 0
    for message in due.order_by("created_at")[:limit]:
        try:
            close(message)
            done += 1
        except Exception as exc:  # one failing update must not stop the others; the next pass retries
            log.warning("could not update the Slack message of hold %s: %s", message.hold_id, exc)
    return done


# --- a button pressed ------------------------------------------------------------------------------


def person_for(slack_user: str):
    """The active person a Slack user is: an explicit link first, else the person whose address is the
    Slack user's confirmed e-mail (exactly one). None when neither."""
    link = SlackLink.objects.select_related("user").filter(slack_user_id=slack_user, user__is_active=True).first()
    if link is not None:
        return link.user
    try:
        profile = client().users_info(user=slack_user)["user"]
    except SlackApiError as exc:
        if exc.response.get("error") in ("user_not_found", "user_not_visible"):
            return None
        raise  # Slack is down or the token is wrong: the task retries
    email = (profile.get("profile") or {}).get("email") or ""
    if not email or not profile.get("is_email_confirmed"):
        return None
    found = list(get_user_model().objects.filter(email__iexact=email, is_active=True)[:2])
    return found[0] if len(found) == 1 else None


def _tell(channel: str, slack_user: str, text: str) -> None:
    """An ephemeral message: only the person who pressed sees it."""
    client().chat_postEphemeral(channel=channel, user=slack_user, text=text)


def decide(*, slack_user: str, channel: str, action: str, hold_ref: str) -> str:
    """A verified button press: decides the hold as the mapped person, once, or says why not."""
    hold_id = parse_public_id(hold_ref, HOLD)
    hold = Hold.objects.select_related("capability").filter(pk=hold_id).first() if hold_id else None
    if hold is None:
        services.slack_refused(slack_user=slack_user, reason="unknown hold")
        _tell(channel, slack_user, "Review Queue does not know this hold.")
        return "unknown-hold"
    person = person_for(slack_user)
    if person is None:
        services.slack_refused(slack_user=slack_user, reason="no person", hold_id=hold.pk)
        _tell(
            channel,
            slack_user,
            "Your Slack account is not linked to a Review Queue person (no confirmed e-mail address matches, "
            "and no admin linked it on your person's page). Nothing was decided.",
        )
        return "unmapped"
    items = list(hold.items.order_by("position").values_list("item_id", flat=True))
    verb = (Action.APPROVE if action == APPROVE else Action.REJECT).value
    body = {"items": [{"id": item, "action": verb} for item in items]}
    try:
        decided = services.hold_decide(hold_id=hold.pk, actor=actor_for_user(person), body=body)
    except ServiceError as refusal:
        reason = refusal.code
        services.slack_refused(slack_user=slack_user, reason=str(reason), hold_id=hold.pk, person=person.username)
        _tell(channel, slack_user, f"Not decided: {_refusal_text(refusal)} {hold_url(hold)}")
        return "refused"
    if decided.status == decided.Status.PENDING:
        # An approval toward a quorum that does not complete it: the message stays open for the others.
        remaining = decided.quorum_state["remaining"]
        _tell(channel, slack_user, f"Approval recorded; {remaining} more needed. {hold_url(hold)}")
        return "approved"
    message = SlackMessage.objects.filter(hold_id=hold.pk, closed_at__isnull=True).first()
    if message is not None:
        try:
            close(message)
        except Exception as exc:  # decided all the same: beat's close_due pass updates it later
            log.warning("could not update the Slack message of hold %s: %s", hold.public_id, exc)
    return "decided"


def _refusal_text(refusal: ServiceError) -> str:
    if refusal.code == "invalid":
        return "this hold needs a choice per item, an edit or a comment; decide it on its page:"
    extra = refusal.extra.get("decided_by")
    return f"{refusal.message}{f' (by {extra})' if extra else ''}; see"
