"""What every channel says about a hold, in one place: the link to its page and agent-written text
made safe for a header or a chat line. E-mail, the webhook, Slack and Web Push all use these."""

import re

from django.conf import settings
from django.urls import reverse

from .models import Hold

CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def hold_url(hold: Hold) -> str:
    return settings.RQ_PUBLIC_URL + reverse("hold", args=[hold.public_id])


def one_line(text: str, limit: int = 200) -> str:
    """Agent-written text for a header or a chat line: no line breaks or control characters."""
    text = CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_escape(text: str) -> str:
    # Slack's mrkdwn: only these three are special; escaping them also defuses <!channel> pings.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
