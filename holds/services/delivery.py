"""Delivery: a worker claims an invocation, records what the agent answered, retries, parks or stalls.

The HTTP call itself is holds/delivery.py's; everything it changes in the database is here.
"""

import json
import random
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Q, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..auth import SYSTEM, Actor
from ..errors import Conflict, NotFound
from ..models import AuditKind, Capability, Hold, Invocation, Notification, Run
from ..policy import may_administer, require
from ..schemas import schema_errors
from ..words import DeliveryResult, OutcomeKind
from . import gateway, ports, sql
from .audit import audit
from .runs import UNSENT_INVOCATION, experiment_may_be_over, finish_run


@dataclass(frozen=True)
class Claim:
    invocation: Invocation
    attempt: int
    # An earlier attempt was sent (its answer lost, or a worker lost while it waited): it may have
    # reached the agent. The first claim of an invocation is the one that sets first_sent_at.
    sent_before: bool = False


# What a send reads, in the order sql.CLAIM returns it; any other field loads on first use.
_CLAIM_COLUMNS = (
    gateway.Columns(
        Invocation,
        "i",
        ["id", "run_id", "kind", "seq", "status", "resume", "hold_id", "attempts", "next_attempt_at", "lease_until"]
        + ["first_sent_at"],
    ),
    gateway.Columns(
        Run,
        "r",
        ["id", "capability_id", "version", "endpoint", "status", "seq", "input"]
        + ["parent_id", "experiment_id", "dataset_item_id"],
    ),
    gateway.Columns(
        Capability,
        "c",
        ["id", "name", "secret", "timeout_seconds", "endpoint_disabled_at", "endpoint_stalled_at", "protocol"]
        + ["output_schema"],
    ),
)
CLAIM_SQL = sql.CLAIM.format(columns=", ".join(c.select(named=True) for c in _CLAIM_COLUMNS))


def invocation_claim(*, invocation_id: str) -> Claim | None:
    """A worker claims a due invocation before it sends it (None: not due, or someone else has it).

    The claim is one conditional UPDATE with a lease, so a worker that dies mid-send leaves a row
    the relay hands out again once the lease ends; the agent sees the same webhook-id again. Two
    workers racing for one row both run the UPDATE; PostgreSQL re-checks the WHERE clause of the
    second against the first one's result, so only one of them gets a row back. The same statement
    moves a held run on to its resume and returns what the send needs (run, capability).
    """
    now = timezone.now()
    # A claim lost in a database crash only means a second send with the same webhook-id, which
    # delivery is built for; not waiting for the disk halves the cost of a send.
    # It waits first for a decision still committing this invocation, if one is (sql.WAIT_FOR_RESUME).
    _, _, claimed = gateway.one_round_trip(
        [sql.COMMIT_WITHOUT_WAITING, sql.WAIT_FOR_RESUME, CLAIM_SQL],
        {
            "id": invocation_id,
            "now": now,
            "grace": float(settings.RQ_LEASE_GRACE),
            "resume_lock": sql.resume_lock(invocation_id),
        },
    )
    if not claimed:
        return None
    row = claimed[0]
    invocation, run = gateway.with_run(*gateway.build(_CLAIM_COLUMNS, row))
    moved = row[-1]
    if invocation.status == Invocation.Status.PARKED:
        if run.experiment_id is not None:
            _fail_parked_eval_run(run, invocation)
        return None
    if moved:
        # A run is held from its suspended answer until its resume is first sent; from then on
        # the resume is the run's current invocation.
        run.status, run.seq = Run.Status.RUNNING, invocation.seq
    return Claim(invocation=invocation, attempt=invocation.attempts, sent_before=invocation.first_sent_at != now)


def _fail_parked_eval_run(run: Run, invocation: Invocation) -> None:
    """An eval invocation parked behind a disabled endpoint fails its run, so that its experiment
    finishes (SPEC "Settled": Evals); the endpoint stays disabled for everyone else."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).filter(pk=run.pk).first()
        if locked.finished:
            return
        finish_run(
            locked,
            status=Run.Status.FAILED,
            actor=SYSTEM,
            error=f"eval run: invocation {invocation.id} parked, the endpoint is disabled",
        )


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to; holds/delivery.py classifies the HTTP result into this."""

    kind: OutcomeKind
    answer: dict | None = None
    status_code: int | None = None
    error: str = ""
    retry_after: float | None = None
    latency_ms: int = 0
    started_at: object = None
    timed_out: bool = False  # no answer within the capability's timeout: the endpoint is stalled


def invocation_record(*, invocation_id: str, attempt: int, outcome: Outcome, claim: Claim | None = None) -> str:
    """Records one attempt and moves the invocation (and its run and hold) on. Returns the result.

    Only the worker holding the claim for this attempt may record it; a stale worker (whose lease
    ran out and whose row was handed to another) records nothing. `claim`: the worker's own, which
    lets a plain "completed" answer be recorded in one round trip (_record_completed).
    """
    if claim is not None and _record_completed(claim, outcome):
        return DeliveryResult.ANSWERED
    # The BEGIN travels with the locks, the writes after them together with the COMMIT.
    with gateway.transaction():
        locked = _lock_claimed(invocation_id=invocation_id, attempt=attempt)
        if locked is None:
            return _record_closed(invocation_id=invocation_id, attempt=attempt, outcome=outcome)
        invocation, run, asked = locked
        if run.finished:
            # An admin failed the run while the agent was answering: the answer changes nothing.
            _set_invocation(invocation, Invocation.Status.ANSWERED, answer=outcome.answer, error=outcome.error)
            result = _stale(invocation, run)
        else:
            result = _apply_outcome(invocation, run, asked, outcome)
        _write_attempt(invocation=invocation, attempt=attempt, outcome=outcome, result=result)
        _note_stall(run, invocation, outcome)
    return result


def _stale(invocation: Invocation, run: Run) -> str:
    audit(AuditKind.RUN_STALE_ANSWER, SYSTEM, run_id=run.pk, invocation_id=invocation.id, run_status=run.status)
    return DeliveryResult.STALE


def _record_closed(*, invocation_id: str, attempt: int, outcome: Outcome) -> str:
    """The claim is gone. When that is because the run finished under this very attempt (an eval run's
    ask closed it), the answer is recorded as stale and changes nothing; a claim lost to a lease that ran
    out records nothing (the attempt that holds it now will)."""
    closed = (
        Invocation.objects.select_related("run")
        .filter(pk=invocation_id, attempts=attempt, status=Invocation.Status.FAILED)
        .first()
    )
    if closed is None or not closed.run.finished:
        return DeliveryResult.STALE
    _write_attempt(invocation=closed, attempt=attempt, outcome=outcome, result=DeliveryResult.STALE)
    return _stale(closed, closed.run)


def _note_stall(run: Run, invocation: Invocation, outcome: Outcome) -> None:
    """A timeout stalls the endpoint; any HTTP answer (even an error) shows it answers again."""
    capability = run.capability
    event, details = None, {}
    if outcome.timed_out:
        # probe_until is freed too: the probe (if this was it) is over, the next delivery may try.
        Capability.objects.filter(pk=capability.pk).update(
            endpoint_stalled_at=Coalesce(F("endpoint_stalled_at"), timezone.now()), endpoint_probe_until=None
        )
        if capability.endpoint_stalled_at is None:
            event, details = AuditKind.CAPABILITY_ENDPOINT_STALLED, {"reason": outcome.error}
    elif outcome.status_code is not None and capability.endpoint_stalled_at is not None:
        cleared = Capability.objects.filter(pk=capability.pk, endpoint_stalled_at__isnull=False).update(
            endpoint_stalled_at=None, endpoint_probe_until=None
        )
        event = AuditKind.CAPABILITY_ENDPOINT_ANSWERING if cleared else None
    if event:
        audit(event, SYSTEM, run_id=run.pk, invocation_id=invocation.id, capability=capability.name, **details)
    _count_failure(capability, outcome)


def _count_failure(capability: Capability, outcome: Outcome) -> None:
    """Failed attempts in a row (no HTTP answer, or a 5xx) for ops' "failing" label; an answer below
    500 clears them. Counted per capability, since its endpoint is what is down. Admins are told once
    when a spell becomes failing and once when it ends (notifications.deliver_endpoint; its rows are
    the claim, so concurrent attempts send one message)."""
    failing_kind, answering_kind = Notification.Kind.ENDPOINT_FAILING, Notification.Kind.ENDPOINT_ANSWERING
    if outcome.status_code is None or outcome.status_code >= 500:
        [(failures, since, disabled_at)] = gateway.fetch(
            sql.COUNT_ENDPOINT_FAILURE, {"id": capability.pk, "now": timezone.now()}
        )
        counted = Capability(endpoint_failures=failures, endpoint_failing_since=since, endpoint_disabled_at=disabled_at)
        if counted.endpoint_failing(timezone.now()) and not _told(capability, since, failing_kind):
            ports.endpoint_changed_on_commit(capability.pk, failing_kind, since)
    elif capability.endpoint_failures:
        # Locked, so that of two answers at once one ends the spell and reads when it began.
        since = (
            Capability.objects.select_for_update()
            .filter(pk=capability.pk, endpoint_failures__gt=0)
            .values_list("endpoint_failing_since", flat=True)
            .first()
        )
        if since is None:
            return
        Capability.objects.filter(pk=capability.pk).update(endpoint_failures=0, endpoint_failing_since=None)
        if _told(capability, since, failing_kind):
            ports.endpoint_changed_on_commit(capability.pk, answering_kind, since)


def _told(capability: Capability, since, kind: str) -> bool:
    """Whether admins were (or are being) told of this failing spell."""
    return Notification.objects.filter(capability_id=capability.pk, spell=since, kind=kind).exists()


def endpoint_take_probe(*, capability: Capability) -> bool:
    """While an endpoint is stalled, one delivery at a time may try it. True: this one may send
    (it holds the probe for its timeout and lease grace, or the endpoint is no longer stalled)."""
    now = timezone.now()
    lease = now + timedelta(seconds=capability.timeout_seconds + settings.RQ_LEASE_GRACE)
    taken = Capability.objects.filter(
        Q(endpoint_probe_until__isnull=True) | Q(endpoint_probe_until__lt=now), pk=capability.pk
    ).update(endpoint_probe_until=lease)
    return bool(taken) or not Capability.objects.filter(pk=capability.pk, endpoint_stalled_at__isnull=False).exists()


def invocation_defer(*, invocation_id: str, attempt: int, wait: float, reason: str) -> str:
    """Hands a claimed, unsent invocation back to wait (its endpoint is stalled or busy): no attempt
    is counted (nothing was sent), and the relay hands it out again after `wait` seconds (jittered,
    so the waiting deliveries do not all come back at once)."""
    wait *= random.uniform(0.8, 1.2)
    Invocation.objects.filter(pk=invocation_id, status=Invocation.Status.DELIVERING, attempts=attempt).update(
        status=Invocation.Status.PENDING,
        attempts=F("attempts") - 1,
        # It was never sent if this claim was its first.
        first_sent_at=Case(When(attempts=1, then=None), default=F("first_sent_at")),
        lease_until=None,
        next_attempt_at=timezone.now() + timedelta(seconds=wait),
        last_error=reason,
    )
    # Not "waiting": that is the status of a resume held back until its asker has answered.
    return DeliveryResult.DEFERRED


# What recording an answer reads, in the order sql.LOCK_CLAIMED returns it; any other field loads on use.
_LOCK_COLUMNS = (
    gateway.Columns(
        Invocation,
        "i",
        ["id", "run_id", "kind", "seq", "status", "hold_id", "attempts", "next_attempt_at", "lease_until"]
        + ["answered_at", "answer", "last_error"],
    ),
    gateway.Columns(
        Run,
        "r",
        ["id", "capability_id", "version", "endpoint", "status", "seq", "error", "parent_id"]
        + ["finished_at", "experiment_id"],
    ),
    gateway.Columns(
        Capability,
        "c",
        ["id", "name", "output_schema", "timeout_seconds", "endpoint_disabled_at", "endpoint_stalled_at"]
        + ["endpoint_failures"],
    ),
)
_LOCK_SQL = sql.LOCK_CLAIMED.format(columns=", ".join(c.select() for c in _LOCK_COLUMNS))


def _lock_claimed(*, invocation_id: str, attempt: int) -> tuple[Invocation, Run, Hold | None] | None:
    """Locks a claimed invocation and its run for recording its answer, then the hold it asked, if
    any, in one round trip. None: the claim is stale."""
    locked, asked = gateway.one_round_trip(
        [_LOCK_SQL, sql.LOCK_ASKED], {"id": invocation_id, "attempt": attempt}, savepoint=False
    )
    if not locked:
        return None
    invocation, run = gateway.with_run(*gateway.build(_LOCK_COLUMNS, locked[0]))
    return invocation, run, (Hold.from_db(connection.alias, ["id", "status"], list(asked[0])) if asked else None)


def _write_attempt(*, invocation: Invocation, attempt: int, outcome: Outcome, result: str) -> None:
    """The attempt row and its audit event (sql.WRITE_ATTEMPT)."""
    gateway.write((sql.WRITE_ATTEMPT, _attempt_params(invocation, attempt, outcome, result)))


def _attempt_params(invocation: Invocation, attempt: int, outcome: Outcome, result: str) -> dict:
    """What sql.WRITE_ATTEMPT (and sql.RECORD_COMPLETED, which writes the same rows) is given."""
    data = {
        "attempt": attempt,
        "status_code": outcome.status_code,
        "result": result,
        "error": (outcome.error or "")[:200],
    }
    return {
        "id": invocation.id,
        "attempt": attempt,
        "started_at": outcome.started_at or timezone.now(),
        "latency_ms": outcome.latency_ms,
        "status_code": outcome.status_code,
        "result": result,
        "error": (outcome.error or "")[:500],
        "at": timezone.now(),
        "actor": SYSTEM.label,
        "run": invocation.run_id,
        "data": json.dumps(data),
    }


def _record_completed(claim: Claim, outcome: Outcome) -> bool:
    """The common answer, "completed" with an output that its schema accepts, recorded in one round trip
    (sql.RECORD_COMPLETED) where the general path would write the same rows in two: 1.60 against 2.36 ms,
    and 0.49 against 0.97 ms of the worker's CPU, alternating in one process (docs/benchmarks-notes.md;
    the burst's drain did not show it). False: not that answer, or something the
    general path handles (a run to cancel holds of, a stalled endpoint, a claim gone...); nothing was
    written, and invocation_record goes on as it does for every other answer."""
    answer = outcome.answer
    if outcome.kind != OutcomeKind.ANSWER or answer.get("status") != "completed":
        return False
    invocation, run = claim.invocation, claim.invocation.run
    schema = run.capability.output_schema
    if schema_errors(schema, answer.get("output"), "output"):
        return False  # the general path fails the run, with the errors
    params = _attempt_params(invocation, claim.attempt, outcome, DeliveryResult.ANSWERED)
    params |= {
        "schema": None if schema is None else json.dumps(schema),
        "unsent": [str(s) for s in UNSENT_INVOCATION],
        "answer": Invocation._meta.get_field("answer").get_db_prep_save(answer, connection),
        "output": Run._meta.get_field("output").get_db_prep_save(answer.get("output"), connection),
    }
    _, written = gateway.one_round_trip([sql.LOCK_CLAIM_ROWS, sql.RECORD_COMPLETED], params, savepoint=False)
    if written:
        run.status = Run.Status.COMPLETED
        experiment_may_be_over(run)
    return bool(written)


def _apply_outcome(invocation: Invocation, run: Run, asked: Hold | None, outcome: Outcome) -> str:
    if outcome.kind == OutcomeKind.ANSWER:
        return _apply_answer(invocation, run, outcome.answer, asked)
    if outcome.kind == OutcomeKind.GONE:
        Capability.objects.filter(pk=run.capability_id).update(endpoint_disabled_at=timezone.now())
        if run.experiment_id is not None:
            # An eval run does not wait for an admin: it fails, and its experiment can finish.
            _set_invocation(invocation, Invocation.Status.FAILED, error=outcome.error)
            finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=f"eval run: {outcome.error}")
        else:
            _set_invocation(invocation, Invocation.Status.PARKED, error=outcome.error)
        audit(
            AuditKind.CAPABILITY_ENDPOINT_DISABLED,
            SYSTEM,
            run_id=run.pk,
            invocation_id=invocation.id,
            capability=run.capability.name,
            reason="the agent answered 410 Gone",
        )
        return DeliveryResult.PARKED
    if outcome.kind == OutcomeKind.FATAL:
        _set_invocation(invocation, Invocation.Status.FAILED, error=outcome.error)
        finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=outcome.error)
        return DeliveryResult.FAILED
    # A failed attempt. After an ask it counts as the suspended answer on that hold: retrying
    # would re-run an agent that already put its question to a person.
    if asked is not None:
        return _apply_answer(
            invocation, run, {"status": "suspended", "hold_id": asked.public_id}, asked, note=outcome.error
        )
    schedule = settings.RQ_RETRY_SCHEDULE
    if invocation.attempts >= len(schedule):
        if run.experiment_id is not None:
            # An eval run fails rather than wait for an admin's retry: every experiment finishes.
            _set_invocation(invocation, Invocation.Status.FAILED, error=outcome.error)
            finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=f"eval run undeliverable: {outcome.error}")
            return DeliveryResult.FAILED
        _set_invocation(invocation, Invocation.Status.UNDELIVERABLE, error=outcome.error)
        return DeliveryResult.UNDELIVERABLE
    delay = schedule[invocation.attempts] * random.uniform(0.8, 1.2)
    if outcome.retry_after is not None:
        delay = max(delay, outcome.retry_after)
    invocation.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    _set_invocation(invocation, Invocation.Status.PENDING, error=outcome.error)
    return DeliveryResult.RETRY


def _set_invocation(invocation: Invocation, status: str, *, error: str = "", answer=None) -> None:
    invocation.status = status
    invocation.lease_until = None
    invocation.last_error = (error or "")[:2000]
    if answer is not None:
        invocation.answer = answer
        invocation.answered_at = timezone.now()
    gateway.write(
        (
            sql.SET_INVOCATION,
            [
                invocation.status,
                invocation.last_error,
                Invocation._meta.get_field("answer").get_db_prep_save(invocation.answer, connection),
                invocation.answered_at,
                invocation.next_attempt_at,
                invocation.pk,
            ],
        )
    )


def _apply_answer(invocation: Invocation, run: Run, answer: dict, asked: Hold | None, note: str = "") -> str:
    status = answer["status"]
    if status == "completed":
        errors = schema_errors(run.capability.output_schema, answer.get("output"), "output")
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        if errors:
            reason = "the agent's output does not match the output schema: " + "; ".join(
                f"{e['field']}: {e['message']}" for e in errors
            )
            finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=reason)
            return DeliveryResult.FAILED
        finish_run(run, status=Run.Status.COMPLETED, actor=SYSTEM, output=answer.get("output"))
        return DeliveryResult.ANSWERED
    if status == "failed":
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=str(answer.get("error") or "failed"))
        return DeliveryResult.ANSWERED
    if status == "working":
        # An A2A task the agent goes on with: the invocation waits in the database until a push
        # notification wakes it (a2a_push_received), or the poll comes due (holds/protocols/a2a.py).
        # A push that came while this attempt was in flight woke nothing: the poll comes soon at first.
        wait = min(settings.RQ_A2A_POLL, 2 ** min(invocation.attempts, 16))
        invocation.next_attempt_at = timezone.now() + timedelta(seconds=wait)
        _set_invocation(invocation, Invocation.Status.PENDING, answer=answer)
        return DeliveryResult.WORKING
    # suspended: it must name the hold that this invocation asked, whatever its status now.
    hold_id = answer.get("hold_id")
    if asked is None or hold_id != asked.public_id:
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        reason = f"the agent answered suspended on {hold_id!r}, but this invocation asked " + (
            f"{asked.public_id}" if asked else "no hold"
        )
        finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=reason)
        return DeliveryResult.FAILED
    _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer, error=note)
    run.status = Run.Status.HELD
    run.save(update_fields=["status"])
    # A decision (or expiry) that came while the agent was still answering was waiting for this.
    released = list(
        Invocation.objects.filter(run=run, hold=asked, status=Invocation.Status.WAITING).values_list("pk", flat=True)
    )
    if released:
        Invocation.objects.filter(pk__in=released).update(
            status=Invocation.Status.PENDING, next_attempt_at=timezone.now()
        )
        ports.publish_on_commit(released)
    elif asked.status == Hold.Status.PENDING:
        # Reviewers hear about a hold once its run is held on it. (A hold already decided or expired
        # needs nobody.)
        ports.hold_asked_on_commit(asked.pk)
    audit(AuditKind.RUN_HELD, SYSTEM, run_id=run.pk, hold_id=asked.pk, invocation_id=invocation.id, note=note)
    return DeliveryResult.ANSWERED


def invocation_retry(*, invocation_id: str, actor: Actor) -> Invocation:
    """An admin sends an undeliverable invocation again, with a fresh schedule."""
    require(may_administer(actor, "may retry a delivery"))
    with transaction.atomic():
        won = Invocation.objects.filter(pk=invocation_id, status=Invocation.Status.UNDELIVERABLE).update(
            status=Invocation.Status.PENDING, attempts=0, next_attempt_at=timezone.now()
        )
        invocation = Invocation.objects.filter(pk=invocation_id).first()
        if invocation is None:
            raise NotFound(f"invocation {invocation_id} does not exist")
        if won != 1:
            raise Conflict(
                f"invocation {invocation_id} is {invocation.status}, not undeliverable", code="not_undeliverable"
            )
        audit(AuditKind.INVOCATION_RETRIED, actor, run_id=invocation.run_id, invocation_id=invocation.id)
        ports.publish_on_commit([invocation.id])
    return invocation


def capability_enable(*, capability_id: int, actor: Actor) -> Capability:
    """An admin enables an endpoint that answered 410: parked invocations are due again."""
    require(may_administer(actor, "may enable an endpoint"))
    with transaction.atomic():
        capability = Capability.objects.select_for_update().filter(pk=capability_id).first()
        if capability is None:
            raise NotFound("no such capability")
        capability.endpoint_disabled_at = None
        capability.save(update_fields=["endpoint_disabled_at", "updated_at"])
        parked = list(
            Invocation.objects.filter(run__capability=capability, status=Invocation.Status.PARKED).values_list(
                "pk", flat=True
            )
        )
        Invocation.objects.filter(pk__in=parked).update(
            status=Invocation.Status.PENDING, attempts=0, next_attempt_at=timezone.now()
        )
        audit(AuditKind.CAPABILITY_ENDPOINT_ENABLED, actor, capability=capability.name, released=len(parked))
        ports.publish_on_commit(parked)
    return capability


def invocations_due(*, limit: int = 500) -> list[str]:
    """Outbox rows due now, and claims whose lease ran out (a dead worker)."""
    return list(due_invocations().values_list("pk", flat=True)[:limit])


def invocations_relay(*, limit: int = 500) -> list[str]:
    """The relay takes due rows to publish (sql.RELAY_DUE): as invocations_due, less the rows it
    published within RQ_RELAY_LEASE, which it leases again for that long."""
    now = timezone.now()
    params = {"now": now, "until": now + timedelta(seconds=settings.RQ_RELAY_LEASE), "limit": limit}
    (due,) = gateway.send([(sql.RELAY_DUE, params)])
    return [invocation_id for (invocation_id,) in due]


def invocations_relay_release(*, invocation_ids: list[str]) -> None:
    """The relay could not publish these: they are due to it again at once (sql.RELAY_RELEASE)."""
    gateway.send([(sql.RELAY_RELEASE, {"ids": invocation_ids})])


def due_invocations():
    """Outbox rows due now, and claims whose lease ran out (the partial index invocation_outbox_due)."""
    now = timezone.now()
    return Invocation.objects.filter(
        Q(status=Invocation.Status.PENDING, next_attempt_at__lte=now)
        | Q(status=Invocation.Status.DELIVERING, lease_until__lt=now)
    ).order_by("next_attempt_at")
