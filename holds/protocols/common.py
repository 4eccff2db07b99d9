"""What both protocols share: timing an attempt, the Outcomes they come to, and a pause turned into a hold."""

import time
from datetime import datetime

from django.utils import timezone

from .. import services
from ..errors import Conflict, Invalid, ServiceError
from ..ids import HOLD, public_id
from ..models import Action, Hold, Invocation
from ..schemas import MAX_EXPIRES_IN, MIN_EXPIRES_IN
from ..words import OutcomeKind

# An event stream or JSON-RPC answer may be longer than an invoke answer (1 MiB): it carries the
# conversation. Past this it is refused, as an invoke answer is past 1 MiB.
MAX_BYTES = 8 * 1024 * 1024
ERROR_EXCERPT = 300
# A reviewer may approve, edit (under the item's schema) or reject what an agent paused on.
ASKED_ACTIONS = [Action.APPROVE.value, Action.EDIT.value, Action.REJECT.value]


class Attempt:
    """The timing of one attempt, and the Outcomes it may come to."""

    def __init__(self):
        self.started_at = timezone.now()
        self.start = time.monotonic()
        self.status_code: int | None = None

    def _common(self) -> dict:
        return {
            "latency_ms": int((time.monotonic() - self.start) * 1000),
            "started_at": self.started_at,
            "status_code": self.status_code,
        }

    def answer(self, answer: dict) -> services.Outcome:
        return services.Outcome(kind=OutcomeKind.ANSWER, answer=answer, **self._common())

    def retry(self, error: str) -> services.Outcome:
        """Not the protocol, or cut short: another attempt may do better (the invoke protocol's rule for
        an invalid 2xx answer)."""
        return services.Outcome(kind=OutcomeKind.RETRY, error=error[:2000], **self._common())

    def fatal(self, error: str) -> services.Outcome:
        """The agent answered in a way that no retry changes: the run fails with this error."""
        return services.Outcome(kind=OutcomeKind.FATAL, error=error[:2000], **self._common())


def ask(invocation: Invocation, body: dict) -> str:
    """The hold for a pause, through the ask service (the one `POST /v0/holds` uses, rules and all).

    Safe to run twice: an invocation asks at most one hold, so a replayed attempt (a lease that ran out
    after the first one asked) names the hold that the first one asked. Raises ServiceError with a
    message for the run's error when the pause cannot be asked (an invalid item, a quota).
    """
    try:
        return services.hold_ask(invocation=invocation, body=body).public_id
    except Conflict:
        asked = Hold.objects.filter(invocation_id=invocation.id).values_list("pk", flat=True).first()
        if asked is None:
            raise
        return public_id(HOLD, asked)


def ask_problem(exc: ServiceError) -> str:
    """A refused ask, in words for the run's error."""
    if isinstance(exc, Invalid):
        return "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors)
    return exc.message


def expires_in(expiries: list[datetime]) -> int | None:
    """The hold's expiry from the agent's: the earliest (a hold has one), within what an ask allows."""
    if not expiries:
        return None
    seconds = int((min(expiries) - timezone.now()).total_seconds())
    return max(MIN_EXPIRES_IN, min(MAX_EXPIRES_IN, seconds))


def asking_answer(invocation: Invocation) -> dict:
    """What the invocation that asked this resume's hold answered (its protocol's memory), or {}."""
    hold = Hold.objects.filter(pk=invocation.hold_id).only("invocation_id").first()
    if hold is None:
        return {}
    answer = Invocation.objects.filter(pk=hold.invocation_id).values_list("answer", flat=True).first()
    return answer if isinstance(answer, dict) else {}
