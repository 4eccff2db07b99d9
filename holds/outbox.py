"""Publishing outbox rows to the broker. The database row is the truth; this is the fast path.

A publish that fails (broker down, crash after commit) loses nothing: the relay task finds every
due row in the database and publishes it again.
"""

import logging

log = logging.getLogger(__name__)


def publish(invocation_ids: list[str]) -> None:
    from .tasks import deliver

    for invocation_id in invocation_ids:
        try:
            deliver.delay(invocation_id)
        except Exception:
            log.warning("could not publish %s; the relay will pick it up", invocation_id, exc_info=True)
