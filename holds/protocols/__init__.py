"""Agents that speak another protocol than the agentos invoke: AG-UI and A2A (SPEC "Round 3: every agent
protocol"). A capability names its protocol in agentos.yaml (`protocol:`).

Each module turns one claimed invocation into its protocol's call, and what came back into the Outcome
that delivery records. So a protocol's run keeps every delivery guarantee of an agentos run: the claim and
its lease, retries with backoff in the database, exactly one resume per hold, the relay, the ops page and
the metrics. A pause becomes a hold through the ask service, the same one as `POST /v0/holds`.
"""

from collections.abc import Callable

import httpx

from .. import services
from ..models import Protocol
from . import a2a, agui

EXCHANGES = {Protocol.AG_UI: agui.exchange, Protocol.A2A: a2a.exchange}


def exchange(
    claim: services.Claim, client: httpx.Client, *, signed_headers: Callable[[bytes], dict], classify: Callable
) -> services.Outcome:
    """One attempt of a claimed invocation of an AG-UI or A2A capability. `signed_headers(body)` signs a
    request as the invoke protocol does; `classify` reads an HTTP answer that is not 2xx (or none)."""
    return EXCHANGES[claim.invocation.run.capability.protocol](
        claim, client, signed_headers=signed_headers, classify=classify
    )
