"""Web Push: a new hold's intent to the browsers of the people who may decide it.

The payload is the hold's id, its intent (one line) and its page, never items or arguments: a push
service and a lock screen are outside the sign-in. VAPID signs each request (pywebpush); a
subscription the push service answers 404 or 410 for is deleted. A TTL is set: the default 0 lets a
push service drop the message when the device is offline.
"""

import json
import logging

from django.conf import settings
from pywebpush import WebPushException, webpush

from . import services
from .messages import hold_url, one_line
from .models import Hold, PushSubscription

log = logging.getLogger(__name__)

TTL = 3600


def configured() -> bool:
    return bool(settings.RQ_VAPID_PRIVATE_KEY and settings.RQ_VAPID_PUBLIC_KEY)


def payload(hold: Hold) -> str:
    return json.dumps({"hold": hold.public_id, "title": one_line(hold.intent, 150), "url": hold_url(hold)})


def send(hold: Hold, people) -> str:
    """One push per subscription of these people; returns what happened, raises only when every
    subscription failed for a reason other than being gone (so that the task retries)."""
    subscriptions = list(PushSubscription.objects.filter(user__in=people))
    if not subscriptions:
        return "skipped: no subscriptions"
    data = payload(hold)
    sent = gone = 0
    failures = []
    for sub in subscriptions:
        info = {"endpoint": sub.endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}
        try:
            webpush(
                info,
                data=data,
                vapid_private_key=settings.RQ_VAPID_PRIVATE_KEY,
                vapid_claims={"sub": settings.RQ_VAPID_SUBJECT},
                ttl=TTL,
                timeout=settings.RQ_WEBHOOK_TIMEOUT,
            )
            sent += 1
        except WebPushException as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (404, 410):
                services.push_gone(sub.pk)
                gone += 1
            else:
                failures.append(f"{status or exc}")
        except Exception as exc:  # a dead push service must not stop the other subscriptions
            failures.append(f"{exc}")
    if failures and not sent:
        raise RuntimeError(f"every push failed: {'; '.join(failures)[:300]}")
    if failures:
        log.warning("some pushes failed for hold %s: %s", hold.public_id, failures)
    return f"pushed to {sent}, {gone} gone, {len(failures)} failed"
