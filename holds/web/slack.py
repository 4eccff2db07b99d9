"""Slack's interactions endpoint: verifies, refuses replays, acknowledges, and decides after.

Slack signs each request with the app's signing secret; the SDK's SignatureVerifier checks the raw
body and refuses a timestamp more than 5 minutes off. A verified request is recorded by its
signature, so the same request sent again is a replay and is refused. The answer is an empty 200
within Slack's 3 s: the decision (a users.info look-up, hold_decide, chat.update) runs as a task,
and anything it refuses is told to the presser alone (an ephemeral message) and audited.
Unsigned, stale, forged and replayed requests are audited bounded (services.slack_request_refused):
anyone can send them, and the audit log must not be theirs to fill.
"""

import json
import logging
import re
import time

from celery import current_app
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.signature import SignatureVerifier

from .. import services
from ..slack import APPROVE, REJECT
from ..words import SlackRequestRefusal

# By name: pages sit beside the tasks layer and never import it.
DECIDE_TASK = "holds.notify_tasks.slack_decide"

log = logging.getLogger(__name__)
STALE_AFTER = 5 * 60  # seconds either way, as the SDK's SignatureVerifier checks
TIMESTAMP = re.compile(r"[0-9]{1,12}")  # Unix seconds


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")


def _unverified(request) -> SlackRequestRefusal | None:
    """Why the request is not known to be Slack's, or None when it is."""
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp or not signature:
        return SlackRequestRefusal.UNSIGNED
    # The SDK's own int() would raise on a timestamp that is not a number (a 500): it is stale.
    if not TIMESTAMP.fullmatch(timestamp) or abs(time.time() - int(timestamp)) > STALE_AFTER:
        return SlackRequestRefusal.STALE
    verifier = SignatureVerifier(settings.RQ_SLACK_SIGNING_SECRET)
    # Over the raw bytes: the signature covers them exactly.
    return None if verifier.is_valid(request.body, timestamp, signature) else SlackRequestRefusal.FORGED


@csrf_exempt  # Slack's signature is the proof of origin here, not a cookie
@require_POST
def interactions(request):
    if not settings.RQ_SLACK_SIGNING_SECRET:
        return _plain(404, "Slack is not set up on this Review Queue.")
    unverified = _unverified(request)
    if unverified:
        log.warning("refused a Slack request: %s", unverified)
        services.slack_request_refused(reason=unverified)
        return _plain(401, "The Slack signature is missing, wrong, or older than 5 minutes.")
    if services.slack_request_seen(request.headers["X-Slack-Signature"]):
        log.warning("refused a replayed Slack request")
        services.slack_request_refused(reason=SlackRequestRefusal.REPLAYED)
        return _plain(409, "This Slack request was received before; it is not acted on twice.")
    try:
        payload = json.loads(request.POST.get("payload", ""))
        user = str(payload["user"]["id"])
        channel = str((payload.get("channel") or payload.get("container") or {}).get("id") or "")
        actions = payload.get("actions") or []
    except (ValueError, KeyError, TypeError, AttributeError):
        return _plain(400, "The Slack payload is not the JSON of an interaction.")
    for action in actions:
        if isinstance(action, dict) and action.get("action_id") in (APPROVE, REJECT):
            current_app.send_task(DECIDE_TASK, args=(user, channel, action["action_id"], str(action.get("value", ""))))
    # Other presses (the Open link button) only open the page: nothing to do but acknowledge.
    return JsonResponse({}, status=200)
