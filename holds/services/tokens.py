"""Run tokens against the database: the invocation a live token belongs to (auth checks the MAC)."""

import hmac

from ..auth import sha256_hex, token_invocation_id
from ..models import Invocation
from . import gateway, sql


def _live_invocation_with_run(invocation_id: str) -> Invocation | None:
    row = sql.TOKEN.row([invocation_id])
    if row is None or not row[-1]:  # the last column says whether the token is live
        return None
    return gateway.with_run(*gateway.build(sql.TOKEN.parts()[1], row))[0]


def invocation_for_token(token: str) -> Invocation | None:
    """The invocation whose token this is, if that token is live now (sql.LIVE_TOKEN)."""
    invocation_id = token_invocation_id(token)
    invocation = _live_invocation_with_run(invocation_id) if invocation_id else None
    # The stored hash too: a token is only ever the one its invocation was given.
    if invocation is None or not hmac.compare_digest(invocation.token_hash, sha256_hex(token)):
        return None
    return invocation
