"""One MCP call that waits for a person: ask its hold, wait for it to settle, read what was decided.

Shared by /mcp's request_approval and the gateway. Bad input is refused as the protocol's own error
(MCPError, JSON-RPC -32602) before anything is written; nothing here answers the client itself.
"""

import asyncio
import hashlib
import logging
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from .. import ratelimit
from ..auth import Actor
from ..errors import ServiceError
from ..models import Hold
from ..schemas import MAX_ASK_BYTES, canonical_json
from ..services.mcp_calls import Held, mcp_call_ask, mcp_call_finish
from ..words import Action
from .waiter import waiter

# The actions after which the call goes on (with the data as asked, or as edited).
GOES_ON = (Action.APPROVE, Action.EDIT)
HEARTBEAT = 25.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """A settled hold's one item as the caller answers from it."""

    status: str  # decided | expired | cancelled
    action: str | None  # approve | edit | reject (decided only)
    data: dict | None  # the data to go on with: as edited, else as asked
    comment: str | None
    decided_by: str


def call_key(*parts) -> str:
    """An idempotency key from what identifies one call to its client (a retry sends the same)."""
    return "mcp:" + hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def _db(fn):
    """`fn` on a thread of its own, with Django's connection hygiene around it (as a request has)."""

    def run(*args, **kwargs):
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)


def _ask(*, actor: Actor, capability: str, input: dict, ask: dict, key: str | None, window=None) -> Held:
    if len(canonical_json(ask).encode()) > MAX_ASK_BYTES:
        raise MCPError(code=INVALID_PARAMS, message=f"the input is over the ask's limit of {MAX_ASK_BYTES} bytes")
    try:
        ratelimit.api_limit("run_start", actor)
        return mcp_call_ask(capability_name=capability, actor=actor, input=input, ask=ask, key=key, window=window)
    except ServiceError as exc:
        raise MCPError(code=INVALID_PARAMS, message=_message(exc), data=exc.body()) from None


def _message(exc: ServiceError) -> str:
    body = exc.body()
    details = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in body.get("errors", []))
    return f"{body.get('message', 'refused')}{': ' + details if details else ''}"


def _outcome(hold_id: int) -> Outcome:
    hold = Hold.objects.get(pk=hold_id)
    item = hold.items.order_by("position").first()
    if hold.status != Hold.Status.DECIDED:
        return Outcome(status=hold.status, action=None, data=None, comment=None, decided_by=hold.decided_by)
    data = item.decided_data if item.action == Action.EDIT else item.data
    return Outcome(
        status=hold.status,
        action=item.action,
        data=data,
        comment=item.comment or hold.comment,
        decided_by=hold.decided_by,
    )


ask = _db(_ask)
outcome = _db(_outcome)
finish = _db(lambda run_id, answer: mcp_call_finish(run_id=run_id, answer=answer))


async def hold_and_wait(
    *, actor: Actor, capability: str, input: dict, ask_body: dict, key: str | None, window=None, heartbeat=None
):
    """(held, outcome): the call's hold, once settled (at once when the capability's rules or grants
    decide it at the ask). A retry with the same key waits on the same hold; with a `window`, only
    within it (services.mcp_calls.mcp_call_ask). `heartbeat()` is awaited every HEARTBEAT seconds
    meanwhile (a progress notification, for clients that end calls that look idle); its failure is not
    the call's."""
    held = await ask(actor=actor, capability=capability, input=input, ask=ask_body, key=key, window=window)
    settled = asyncio.ensure_future(waiter.wait(held.hold_id))
    try:
        while not (await asyncio.wait({settled}, timeout=HEARTBEAT))[0]:
            if heartbeat is not None:
                try:
                    await heartbeat()
                except Exception:  # noqa: BLE001 (a lost progress notification changes nothing)
                    log.info("mcp: a heartbeat for hold %s failed", held.hold_id, exc_info=True)
        settled.result()
    finally:
        settled.cancel()
    return held, await outcome(held.hold_id)
