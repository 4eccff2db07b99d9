"""The bearer key in front of an MCP app: a service account's, as on /v0/ (never anything in the body)."""

import json

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from ..auth import account_for_key, actor_for_account

SCOPE_KEY = "rq_actor"


def _actor(authorization: str):
    close_old_connections()
    try:
        scheme, _, key = authorization.partition(" ")
        account = account_for_key(key.strip()) if scheme.lower() == "bearer" else None
        return actor_for_account(account) if account is not None else None
    finally:
        close_old_connections()


actor_for_header = sync_to_async(_actor, thread_sensitive=False)


def actor_of(request) -> object:
    """The actor the middleware put on this request's scope."""
    return request.scope[SCOPE_KEY]


class BearerKey:
    """401 (WWW-Authenticate: Bearer, a JSON-RPC error body) unless the request brings a live key."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        actor = await actor_for_header(headers.get("authorization", ""))
        if actor is None:
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32001, "message": "send Authorization: Bearer <service-account key>"},
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="review-queue"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[SCOPE_KEY] = actor
        await self.app(scope, receive, send)
