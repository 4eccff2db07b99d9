"""MCP calls: a tool call (or an elicitation) that waits for a person is a run of one hold.

The MCP call is the run's agent (runs.run_start(inline=True)): it starts the run, asks through the same
hold_ask as `POST /v0/holds` (so whatever the ask applies, rules and grants included, applies here
too), and is told of the decision in-process (holds/mcp/waiter.py) instead of by a resume. It then
finishes the run with the answer it gave. A retry with the same key finds the same run and hold, so
one call is one hold and one answer (docs/decisions.md, "MCP calls").
"""

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ..auth import SYSTEM, Actor
from ..errors import Invalid
from ..models import AuditKind, Hold, IdempotencyKey, Invocation, Run
from . import ports
from .asks import hold_ask
from .audit import audit
from .runs import finish_run, run_start

# The start invocation while the call answers it: delivering, or answered once claimed (mcp_call_claim).
ANSWERING = (Invocation.Status.DELIVERING, Invocation.Status.ANSWERED)


@dataclass(frozen=True)
class Held:
    run_id: int
    hold_id: int


def mcp_call_ask(
    *, capability_name: str, actor: Actor, input: dict, ask: dict, key: str | None, window: timedelta | None = None
) -> Held:
    """Starts the call's run and asks its hold, in one transaction; a retry (same caller and `key`)
    gets the first call's run and hold back. With a `window`, the key names a call only while its
    hold is pending, while its answer is being acted on, and for `window` after the hold settled;
    later the same key is a new call (the gateway's implicit identity, docs/decisions.md). Invalid:
    the capability is unknown or the ask is bad (nothing is written)."""
    with transaction.atomic():
        if key and window is not None:
            _forget_if_past(actor, key, window)
        run, created = run_start(
            capability_name=capability_name, input=input, actor=actor, idempotency_key=key, inline=True
        )
        if not created:
            hold_id = Hold.objects.filter(run=run).values_list("pk", flat=True).first()
            if hold_id is None:  # the key started a run through /v0/runs, not an MCP call
                raise Invalid([{"field": "key", "message": "this call's key belongs to another run"}])
            return Held(run_id=run.pk, hold_id=hold_id)
        invocation = Invocation.objects.get(run=run, seq=1)
        hold = hold_ask(invocation=invocation, body=ask)
        # What delivery does when an agent answers `suspended`: the run is held, reviewers hear of it.
        run.status = Run.Status.HELD
        run.save(update_fields=["status"])
        if hold.status == Hold.Status.PENDING:
            ports.hold_asked_on_commit(hold.pk)
        audit(AuditKind.RUN_HELD, SYSTEM, run_id=run.pk, hold_id=hold.pk, invocation_id=invocation.id)
    return Held(run_id=run.pk, hold_id=hold.pk)


def _forget_if_past(actor: Actor, key: str, window: timedelta) -> None:
    """Frees `key` for a new call when the call it names is over: its hold settled more than `window`
    ago, and nobody is acting on the answer (the run is finished, or its answer was never claimed).
    The key's row is locked first, so that of concurrent new calls one starts the run and the others
    find it."""
    row = IdempotencyKey.objects.select_for_update(of=("self",)).filter(caller=actor.caller_key, key=key).first()
    if row is None:
        return
    hold = Hold.objects.filter(run_id=row.run_id).select_related("run").only("status", "decided_at", "run__status")
    hold = hold.first()
    if hold is None or hold.status == Hold.Status.PENDING or hold.decided_at > timezone.now() - window:
        return
    acting = Invocation.objects.filter(run_id=row.run_id, seq=1, status=Invocation.Status.ANSWERED).exists()
    if hold.run.finished or not acting:
        row.delete()


def mcp_call_claim(*, run_id: int) -> bool:
    """The one caller that may act on the decision (the gateway calls the upstream tool once): True for
    the first of several retries waiting on one hold, by a conditional UPDATE of the run's start
    invocation (delivering -> answered); the others wait for the run's output (mcp_call_output)."""
    claimed = Invocation.objects.filter(run_id=run_id, seq=1, status=Invocation.Status.DELIVERING).update(
        status=Invocation.Status.ANSWERED, answered_at=timezone.now()
    )
    return claimed == 1


def mcp_call_output(*, run_id: int) -> tuple[bool, dict | None]:
    """(finished, output) of a call's run: what a retry answers once the first call has."""
    run = Run.objects.only("status", "output").get(pk=run_id)
    return run.finished, run.output


def mcp_call_finish(*, run_id: int, answer: dict) -> None:
    """The call answered its client: its start invocation is answered and its run completed with the
    answer (its resume, still waiting, is cancelled with it). A second finish changes nothing."""
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).filter(pk=run_id).first()
        if run is None or run.finished:
            return
        Invocation.objects.filter(run=run, seq=1, status__in=ANSWERING).update(
            status=Invocation.Status.ANSWERED,
            answer={"status": "completed", "output": answer},
            answered_at=timezone.now(),
        )
        finish_run(run, status=Run.Status.COMPLETED, actor=SYSTEM, output=answer)
