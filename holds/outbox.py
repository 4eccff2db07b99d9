"""Publishing outbox rows to the broker. The database row is the truth; this is the fast path.

A publish that fails (broker down, crash after commit) loses nothing: the relay task finds every
due row in the database and publishes it again.
"""

import logging

log = logging.getLogger(__name__)


# Past this many, one message carries them all and a worker fans them out: a sweep of a thousand
# holds then spends its time expiring, not talking to the broker.
FAN_OUT_OVER = 20


def publish(invocation_ids: list[str]) -> None:
    from .tasks import deliver, deliver_many

    if len(invocation_ids) > FAN_OUT_OVER:
        try:
            deliver_many.delay(list(invocation_ids))
            return
        except Exception:
            log.warning(
                "could not publish %d invocations; the relay will pick them up", len(invocation_ids), exc_info=True
            )
            return
    for invocation_id in invocation_ids:
        try:
            deliver.delay(invocation_id)
        except Exception:
            log.warning("could not publish %s; the relay will pick it up", invocation_id, exc_info=True)
