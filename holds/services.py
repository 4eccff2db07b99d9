"""THE write path. Every state change of a run, an invocation or a hold is one function here.

Each function does its claim (a conditional UPDATE, or a row lock and a re-check) and everything
that follows from it in one transaction, and writes the audit event in that same transaction.
Outbox rows (invocations) are written with the change that causes them; they are published to
the broker only after commit, and the relay finds any that the broker lost.

State machines (SPEC "Words" and "Precise rules"):
  run:        running -> (held <-> running)* -> completed | failed
  hold:       pending -> decided | expired | cancelled
  invocation: waiting -> pending -> delivering -> answered | failed | undeliverable | parked
              (pending/waiting -> cancelled when the run finishes; delivering -> pending to retry)
"""

import hashlib
import json
import random
from collections import Counter
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta

import jsonschema
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Q, When
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from . import notifications, outbox, prepared, rows
from .auth import (
    LIVE_TOKEN_SQL,
    RUN_TOKEN_HASH_SQL,
    SYSTEM,
    Actor,
    invocation_for_token,
    may_decide,
    run_token_hash,
    run_token_sql_params,
    sha256_hex,
    token_invocation_id,
)
from .errors import Conflict, Forbidden, Invalid, NotFound
from .models import (
    AuditEvent,
    Capability,
    DeliveryAttempt,
    Hold,
    HoldItem,
    IdempotencyKey,
    Invocation,
    PendingCount,
    Run,
    RunFile,
    RunState,
)
from .schemas import blank_to_none, canonical_json, validate_ask, validate_decision

LIVE_INVOCATION = (Invocation.Status.PENDING, Invocation.Status.DELIVERING)
UNSENT_INVOCATION = (Invocation.Status.WAITING, Invocation.Status.PENDING, Invocation.Status.PARKED)


# --- audit -------------------------------------------------------------------------------------


def audit(kind: str, actor: Actor, *, run_id=None, hold_id=None, invocation_id="", **data) -> AuditEvent:
    return AuditEvent.objects.create(
        kind=kind,
        actor=actor.label,
        run_id_ref=run_id,
        hold_id_ref=hold_id,
        invocation_id_ref=invocation_id or "",
        data=data,
    )


# --- helpers -----------------------------------------------------------------------------------


def _schema_errors(schema: dict | None, value, root: str) -> list[dict]:
    if not schema:
        return []
    validator = jsonschema.Draft202012Validator(schema)
    errors = []
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = root
        for part in err.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        errors.append({"field": path, "message": err.message})
    return errors


def _new_invocation(*, run: Run, kind: str, seq: int, status: str, resume=None, hold=None) -> Invocation:
    invocation = Invocation(run=run, kind=kind, seq=seq, status=status, resume=resume, hold=hold)
    invocation.token_hash = run_token_hash(invocation.id)
    if status == Invocation.Status.PENDING:
        invocation.next_attempt_at = timezone.now()
    return invocation


def _publish_on_commit(invocations: list[Invocation]) -> None:
    ids = [inv.id for inv in invocations if inv.status == Invocation.Status.PENDING]
    if ids:
        transaction.on_commit(lambda: outbox.publish(ids))


def _transaction(statements: list[str], params, *, savepoint: bool = True) -> list[list[tuple]]:
    """Runs `statements` as one transaction in one round trip (PostgreSQL, `prepared.send`) and returns
    each one's rows ([] for a statement without any).

    Alone, BEGIN and COMMIT are sent with them. Inside a caller's transaction the statements join
    it, through a savepoint unless the caller would roll back anyway on a failure (two round trips
    saved). Each statement takes its own snapshot (READ COMMITTED): a later one sees what an
    earlier one waited for.
    """
    batch = [(statement, params if "%(" in statement else None) for statement in statements]
    nested = connection.in_atomic_block
    try:
        with transaction.atomic(savepoint=savepoint) if nested else nullcontext():
            results = prepared.send(batch if nested else [("BEGIN", None), *batch, ("COMMIT", None)])
    except BaseException:
        if not nested and connection.connection is not None:
            # A failed statement leaves the spelled-out transaction open and aborted.
            with suppress(Exception):
                connection.connection.execute("ROLLBACK")
        raise
    return results if nested else results[1:-1]


def hold_fingerprint(*, intent: str, actions, details: str, items: list[dict], files) -> str:
    canonical = canonical_json(
        {"intent": intent, "actions": actions, "details": details, "items": items, "files": files}
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- runs --------------------------------------------------------------------------------------


def run_start(
    *,
    capability_name: str,
    input: dict,
    actor: Actor,
    idempotency_key: str | None = None,
) -> tuple[Run, bool]:
    """Starts a run and writes its start invocation (the outbox row) in one transaction.

    With an idempotency key, the same caller and key return the first run (created=False), so a
    retried request never starts a second run. A run token starts a child run of its own run.
    """
    capability = Capability.objects.filter(name=capability_name).first()
    if capability is None:
        raise Invalid([{"field": "capability", "message": f"no capability named '{capability_name}'"}])
    if idempotency_key:
        existing = _idempotent_run(actor, idempotency_key, capability, input)
        if existing is not None:
            return existing, False
    errors = _schema_errors(capability.input_schema, input, "input")
    if errors:
        raise Invalid(errors)
    try:
        with transaction.atomic():
            run = Run.objects.create(
                capability=capability,
                version=capability.version,
                endpoint=capability.endpoint,
                input=input,
                seq=1,
                parent=actor.run if actor.kind == "run" else None,
                started_by_user=actor.user if actor.kind == "user" else None,
                started_by_account=actor.account if actor.kind == "account" else None,
            )
            if idempotency_key:
                IdempotencyKey.objects.create(caller=actor.caller_key, key=idempotency_key, run=run)
            invocation = _new_invocation(run=run, kind="start", seq=1, status=Invocation.Status.PENDING)
            invocation.save(force_insert=True)
            audit("run.started", actor, run_id=run.pk, invocation_id=invocation.id, capability=capability.name)
            _publish_on_commit([invocation])
    except IntegrityError:
        # Another request with the same key won the race; answer with its run.
        existing = _idempotent_run(actor, idempotency_key, capability, input) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    return run, True


def _idempotent_run(actor: Actor, key: str, capability: Capability, input: dict) -> Run | None:
    row = IdempotencyKey.objects.select_related("run").filter(caller=actor.caller_key, key=key).first()
    if row is None:
        return None
    if row.run.capability_id != capability.pk or canonical_json(row.run.input) != canonical_json(input):
        raise Invalid(
            [{"field": "Idempotency-Key", "message": "this key was used with a different capability or input"}],
            "the Idempotency-Key was already used with another body",
            code="idempotency_mismatch",
        )
    return row.run


def run_fail(*, run_id: int, actor: Actor, reason: str) -> Run:
    """An admin fails a run: its pending hold is cancelled and unsent invocations are cancelled."""
    if not actor.is_admin:
        raise Forbidden("only admins may fail a run")
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).filter(pk=run_id).first()
        if run is None:
            raise NotFound(f"run r_{run_id} does not exist")
        if run.finished:
            raise Conflict(f"run {run.public_id} is already {run.status}", code="finished")
        _finish_run(run, status=Run.Status.FAILED, error=reason or "failed by an admin", actor=actor)
    return run


def _finish_run(run: Run, *, status: str, actor: Actor, output=None, error: str = "") -> None:
    """Finishes a locked run: cancels its pending hold and every resume not yet sent."""
    run.status = status
    run.output = output
    run.error = error
    run.finished_at = timezone.now()
    if connection.vendor == "postgresql":
        _finish_run_sql(run, actor)
        return
    run.save(update_fields=["status", "output", "error", "finished_at"])
    # Locked and re-checked, so that a decision committing meanwhile is never overwritten.
    open_holds = Hold.objects.select_for_update().filter(run=run, status=Hold.Status.PENDING)
    cancelled_holds = list(open_holds.values_list("pk", flat=True))
    if cancelled_holds:
        Hold.objects.filter(pk__in=cancelled_holds, status=Hold.Status.PENDING).update(
            status=Hold.Status.CANCELLED, decided_at=timezone.now()
        )
        PendingCount.objects.create(capability_id=run.capability_id, delta=-len(cancelled_holds))
    cancelled_invs = list(Invocation.objects.filter(run=run, status__in=UNSENT_INVOCATION).values_list("pk", flat=True))
    Invocation.objects.filter(pk__in=cancelled_invs).update(status=Invocation.Status.CANCELLED, lease_until=None)
    audit(
        f"run.{status}",
        actor,
        run_id=run.pk,
        error=error,
        cancelled_holds=[f"h_{pk}" for pk in cancelled_holds],
        cancelled_invocations=cancelled_invs,
    )


# _finish_run on PostgreSQL, in one round trip. The first statement locks the run's pending holds:
# a decision or sweep committing meanwhile is waited for, and its hold is then no longer pending. The
# second, with a snapshot taken after those locks, writes the rest, so it also sees (and cancels) the
# unsent resume that such a decision wrote.
_FINISH_RUN_SQL = (
    "SELECT id FROM holds_hold WHERE run_id = %(run)s AND status = 'pending' FOR UPDATE",
    """
WITH finished AS (
    UPDATE holds_run SET status = %(status)s, output = %(output)s, error = %(error)s, finished_at = %(now)s
    WHERE id = %(run)s
), holds AS (
    UPDATE holds_hold SET status = 'cancelled', decided_at = %(now)s
    WHERE run_id = %(run)s AND status = 'pending' RETURNING id
), counted AS (
    INSERT INTO holds_pendingcount (capability_id, delta)
    SELECT %(capability)s, -count(*) FROM holds HAVING count(*) > 0
), invocations AS (
    UPDATE holds_invocation SET status = 'cancelled', lease_until = NULL
    WHERE run_id = %(run)s AND status = ANY(%(unsent)s) RETURNING id
)
INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
SELECT %(now)s, %(actor)s, %(kind)s, %(run)s, NULL, '', jsonb_build_object(
    'error', %(error)s::text,
    'cancelled_holds', COALESCE((SELECT jsonb_agg('h_' || id ORDER BY id) FROM holds), '[]'),
    'cancelled_invocations', COALESCE((SELECT jsonb_agg(id ORDER BY id) FROM invocations), '[]'))
""",
)


def _finish_run_sql(run: Run, actor: Actor) -> None:
    # Always inside the caller's transaction (which locked the run): a failure rolls all of it back.
    params = {
        "run": run.pk,
        "capability": run.capability_id,
        "status": run.status,
        "output": Run._meta.get_field("output").get_db_prep_save(run.output, connection),
        "error": run.error,
        "now": run.finished_at,
        "unsent": [str(status) for status in UNSENT_INVOCATION],
        "actor": actor.label,
        "kind": f"run.{run.status}",
    }
    prepared.write(*((statement, params) for statement in _FINISH_RUN_SQL))


# --- holds -------------------------------------------------------------------------------------


def hold_ask(*, invocation: Invocation, body) -> Hold:
    """The agent asks a question: one pending hold for the run, written with its items.

    Order of refusals is SPEC's: an open hold (409) before an invalid body (422). The partial
    unique index on pending holds per run makes a concurrent second ask fail, not double.
    """
    run = invocation.run
    ask, items, errors = _read_ask(body, run)
    if errors:
        # An open hold answers 409 even for a bad body (SPEC's order); looked up only on this path
        # so that a good ask costs no extra query: the partial unique index refuses a second one.
        _refuse_if_open(run)
        raise Invalid(errors)
    hold, event = _new_hold(ask, items, invocation_id=invocation.id)
    try:
        _insert_ask(hold, items, event, run=run)
    except IntegrityError:
        # The partial unique index on pending holds: this run has asked already.
        _refuse_if_open(run)
        raise
    # Reviewers hear about it once the run is held on it (_apply_answer), not here: publishing a
    # task is a quarter of an ask's time, and the agent's suspended answer follows within moments.
    return hold


def hold_ask_by_token(*, token: str, body) -> Hold | None:
    """hold_ask for a request that brings only its run token; None when the token is not live.

    On PostgreSQL a good ask is one statement with no lookup before it: the statement finds the
    token's invocation and run (LIVE_TOKEN_SQL) and writes the hold only if they are there. Anything
    else (a bad body, an open hold, files to check against the run) looks the token up first, as
    every other endpoint does, so 401, 409 and 422 keep SPEC's order.
    """
    ask, items, errors = _read_ask(body, None)
    invocation_id = token_invocation_id(token)
    if errors or ask.files or connection.vendor != "postgresql" or invocation_id is None:
        invocation = invocation_for_token(token)
        return None if invocation is None else hold_ask(invocation=invocation, body=body)
    hold, event = _new_hold(ask, items, invocation_id=invocation_id)
    try:
        written = _insert_ask(hold, items, event, token_hash=sha256_hex(token))
    except IntegrityError:
        # The run has an open hold (409), unless the token died since the statement ran (401).
        invocation = invocation_for_token(token)
        if invocation is None:
            return None
        _refuse_if_open(invocation.run)
        raise
    if not written:
        return None
    return hold


def _read_ask(body, run: Run | None) -> tuple:
    """(ask, items, errors): the body validated; its files checked against `run` when given."""
    ask, errors = validate_ask(body)
    file_ids = body.get("files") if isinstance(body, dict) and isinstance(body.get("files"), list) else []
    if file_ids and run is not None:
        errors += _file_errors(run, file_ids)
    if errors:
        return ask, [], errors
    items = [item.model_dump(exclude_none=False) for item in ask.items]
    for item in items:
        item["confidence"] = item["confidence"] or {}
    return ask, items, errors


def _new_hold(ask, items: list[dict], *, invocation_id: str) -> tuple[Hold, AuditEvent]:
    """The hold and its audit event, without what comes from the run (filled in as they are written)."""
    confidences = [v for item in items for v in item["confidence"].values()]
    hold = Hold(
        invocation_id=invocation_id,
        intent=ask.intent,
        actions=list(ask.actions),
        details=ask.details,
        files=list(ask.files),
        expires_at=(timezone.now() + timedelta(seconds=ask.expires_in)) if ask.expires_in else None,
        item_count=len(items),
        min_confidence=min(confidences) if confidences else None,
        fingerprint=hold_fingerprint(
            intent=ask.intent, actions=list(ask.actions), details=ask.details, items=items, files=list(ask.files)
        ),
    )
    event = AuditEvent(
        kind="hold.asked",
        invocation_id_ref=invocation_id,
        data={"intent": ask.intent, "items": len(items), "expires_in": ask.expires_in},
    )
    return hold, event


def _search_parts(hold: Hold, items: list[dict]) -> tuple[str, str]:
    """The hold's search text is its intent, its run's public id, its item ids and titles, lowercased:
    the parts before and after the run's id (which the statement may only learn as it runs)."""
    rest = [i["id"] for i in items] + [i["title"] for i in items]
    return (hold.intent + " ").lower(), (" " + " ".join(rest)).lower() if rest else ""


# The run-dependent columns of an ask, filled in by the statement itself.
_ASK_RUN_COLUMNS = ("run_id", "capability_id", "search_text")


def _insert_ask(hold: Hold, items: list[dict], event: AuditEvent, *, run: Run | None = None, token_hash=None) -> bool:
    """Writes a hold, its items, its audit event and its +1 pending count, all or nothing, for `run`,
    or for the run whose live token hashes to `token_hash` (False: there is none, nothing written).

    On PostgreSQL this is one statement (data-modifying CTEs), atomic by itself: one round trip
    with no BEGIN/COMMIT, where the ORM needs five and compiles three INSERTs. Hold and audit row
    are written from their model instances as the ORM would write them; the items go in as one
    array per column, so the statement's text is the same for 1 and 100 items: one prepared
    statement serves every ask (holds/prepared.py), not one per item count.
    """
    head, tail = _search_parts(hold, items)
    if connection.vendor != "postgresql":
        hold.run_id, hold.capability_id = run.pk, run.capability_id
        hold.search_text = head + run.public_id + tail
        rows = [
            HoldItem(position=n, item_id=i["id"], title=i["title"], data=i["data"], confidence=i["confidence"])
            for n, i in enumerate(items)
        ]
        with transaction.atomic():
            hold.save(force_insert=True)
            for row in rows:
                row.hold = hold
            HoldItem.objects.bulk_create(rows)
            event.hold_id_ref, event.run_id_ref, event.actor = hold.pk, run.pk, f"run {run.public_id}"
            event.save(force_insert=True)
            PendingCount.objects.create(capability_id=hold.capability_id, delta=1)
        return True
    sql, params = _ask_statement(hold, items, event, (head, tail), run=run, token_hash=token_hash)
    # Alone it needs no transaction. Inside a caller's, a savepoint keeps a refused ask (the
    # unique index on pending holds) from aborting that transaction. Prepared once per connection:
    # planning the five-part statement was a quarter of a one-item ask (5.8 -> 4.4 ms in process).
    with transaction.atomic() if connection.in_atomic_block else nullcontext():
        (found,) = prepared.send([(sql, params)])
    row = found[0] if found else None
    if row is None:
        return False
    hold.pk, hold.run_id, hold.capability_id = row
    hold.search_text = head + f"r_{hold.run_id}" + tail
    hold._state.adding = False
    event.hold_id_ref, event.run_id_ref, event.actor = hold.pk, hold.run_id, f"run r_{hold.run_id}"
    return True


def _ask_statement(hold: Hold, items: list[dict], event: AuditEvent, search, *, run: Run | None, token_hash) -> tuple:
    """The ask's one statement and its parameters (PostgreSQL). Its first part, `t`, is the run: the
    given one, or the token's, found by primary key and written to only if the token is live. It is
    MATERIALIZED so that the liveness test stays a filter on that one row (auth.LIVE_TOKEN_SQL).
    `search` is _search_parts' (before, after) the run's id."""
    head, tail = search
    if run is not None:
        source = "SELECT %s::bigint AS run_id, %s::bigint AS capability_id, true AS live"
        params = [run.pk, run.capability_id]
    else:
        source = (
            f"SELECT i.run_id, r.capability_id, ({LIVE_TOKEN_SQL}) AS live FROM {Invocation._meta.db_table} i"
            f" JOIN {Run._meta.db_table} r ON r.id = i.run_id WHERE i.id = %s AND i.token_hash = %s"
        )
        params = [hold.invocation_id, token_hash]
    hold_columns, values = _insert_values(hold, skip=_ASK_RUN_COLUMNS)
    params += [head, tail, *values]
    data = HoldItem._meta.get_field("data")
    params += [
        list(range(len(items))),
        [i["id"] for i in items],
        [i["title"] for i in items],
        [data.get_prep_value(i["data"]) for i in items],
        [json.dumps(i["confidence"]) for i in items],
    ]
    event_columns, values = _insert_values(event, skip=("hold_id_ref", "run_id_ref", "actor"))
    params += values
    sql = (
        f"WITH t AS MATERIALIZED ({source}),"
        f" h AS (INSERT INTO {Hold._meta.db_table} (run_id, capability_id, search_text, {', '.join(hold_columns)})"
        f" SELECT t.run_id, t.capability_id, %s || 'r_' || t.run_id || %s, {', '.join(['%s'] * len(hold_columns))}"
        " FROM t WHERE t.live RETURNING id, run_id, capability_id),"
        f" i AS (INSERT INTO {HoldItem._meta.db_table}"
        " (hold_id, position, item_id, title, data, confidence, action, decided_data, comment)"
        " SELECT h.id, x.position, x.item_id, x.title, x.data, x.confidence::jsonb, '', NULL, NULL"
        " FROM h, unnest(%s::int[], %s::text[], %s::text[], %s::text[], %s::text[])"
        " AS x(position, item_id, title, data, confidence)),"
        f" a AS (INSERT INTO {AuditEvent._meta.db_table} (hold_id_ref, run_id_ref, actor, {', '.join(event_columns)})"
        f" SELECT h.id, h.run_id, 'run r_' || h.run_id, {', '.join(['%s'] * len(event_columns))} FROM h),"
        f" p AS (INSERT INTO {PendingCount._meta.db_table} (capability_id, delta) SELECT h.capability_id, 1 FROM h)"
        " SELECT id, run_id, capability_id FROM h"
    )
    return sql, params


def _insert_values(obj, skip=()) -> tuple[list[str], list]:
    """The quoted columns and prepared values the ORM would INSERT for an unsaved instance."""
    columns, values = [], []
    for field in obj._meta.concrete_fields:
        if field.attname in skip or (field.primary_key and getattr(obj, field.attname) is None):
            continue
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(field.pre_save(obj, True), connection))
    return columns, values


def _refuse_if_open(run: Run) -> None:
    open_hold = Hold.objects.filter(run=run, status=Hold.Status.PENDING).values_list("pk", flat=True).first()
    if open_hold is not None:
        raise Conflict("this run already has an open hold", code="hold_open", hold_id=f"h_{open_hold}")


def _file_errors(run: Run, file_ids: list) -> list[dict]:
    wanted = {}
    for i, file_id in enumerate(file_ids):
        if isinstance(file_id, str) and file_id.startswith("f_") and file_id[2:].isdigit():
            wanted[int(file_id[2:])] = i
        elif isinstance(file_id, str) and file_id:
            wanted[-1 - i] = i
    found = set(RunFile.objects.filter(run=run, pk__in=[k for k in wanted if k > 0]).values_list("pk", flat=True))
    return [
        {"field": f"files[{i}]", "message": f"'{file_ids[i]}' is not a file of this run"}
        for pk, i in wanted.items()
        if pk not in found
    ]


def hold_refusal(hold: Hold) -> Conflict:
    """The 409 for a hold that can no longer be decided, with who/when as SPEC asks."""
    if hold.status == Hold.Status.DECIDED:
        return Conflict(
            "this hold was already decided",
            code="already_decided",
            decided_by=hold.decided_by,
            decided_at=hold.decided_at.isoformat() if hold.decided_at else None,
        )
    if hold.status == Hold.Status.CANCELLED:
        return Conflict("this hold was cancelled because its run finished", code="cancelled")
    return Conflict(
        "this hold expired before it was decided",
        code="expired",
        expires_at=hold.expires_at.isoformat() if hold.expires_at else None,
        decided_by=hold.decided_by or None,
        decided_at=hold.decided_at.isoformat() if hold.decided_at else None,
    )


def _decide_query() -> tuple:
    columns = (
        rows.Columns(Hold, "h"),
        rows.Columns(Capability, "c"),
        rows.Columns(Run, "r"),
        rows.Columns(HoldItem, "i"),
    )
    sql = (
        f"SELECT {', '.join(c.select() for c in columns)} FROM {Hold._meta.db_table} h"
        f" JOIN {Capability._meta.db_table} c ON c.id = h.capability_id"
        f" JOIN {Run._meta.db_table} r ON r.id = h.run_id"
        f" LEFT JOIN {HoldItem._meta.db_table} i ON i.hold_id = h.id WHERE h.id = %s ORDER BY i.position"
    )
    return sql, columns


# The hold a decision starts from, with its capability, run and items, one row per item (holds/rows.py
# says why by hand; one round trip where the ORM needs two).
DECIDE_QUERY = rows.Query(_decide_query)


def _hold_to_decide(hold_id: int) -> tuple[Hold | None, list[HoldItem]]:
    sql, columns = DECIDE_QUERY.parts()
    with connection.cursor() as cursor:
        cursor.execute(sql, [hold_id])
        found = cursor.fetchall()
    if not found:
        return None, []
    *head, item_columns = columns
    hold, hold.capability, hold.run = rows.build(head, found[0])
    at = sum(len(part.fields) for part in head)  # where each row's item columns start
    return hold, [item_columns.build(row[at:]) for row in found if row[at] is not None]


def hold_decide(*, hold_id: int, actor: Actor, body, fingerprint: str | None = None) -> Hold:
    """A person or service account decides a hold, once.

    The hold moves pending -> decided in one conditional UPDATE that also tests the database's
    now() against expires_at, in the transaction that writes the per-item decisions and the
    resume invocation. A second, replayed or concurrent decision updates 0 rows and gets 409.
    """
    hold, items = _hold_to_decide(hold_id)
    if hold is None:
        raise NotFound(f"hold h_{hold_id} does not exist")
    if actor.kind == "run":
        raise Forbidden("a run token may read holds but never decide them")
    if not may_decide(actor, hold.capability, hold.run):
        raise Forbidden(f"your role may not decide holds of {hold.capability.name}")
    if hold.status != Hold.Status.PENDING:
        raise hold_refusal(hold)
    # The application's clock answers early; the conditional UPDATE below tests the database's.
    if hold.expires_at and hold.expires_at <= timezone.now():
        raise hold_refusal(Hold(status=Hold.Status.EXPIRED, expires_at=hold.expires_at))
    if fingerprint is not None and fingerprint != hold.fingerprint:
        raise Conflict("this hold changed since it was shown; reload it", code="changed")
    decision, errors = validate_decision(
        body, asked={item.item_id: item.data for item in items}, actions=list(hold.actions)
    )
    if errors:
        raise Invalid(errors)
    comment = blank_to_none(decision.comment)
    by_id = {d.id: d for d in decision.items}
    resume_items = []
    for item in items:
        choice = by_id[item.item_id]
        item.action = choice.action
        item.decided_data = choice.data if choice.action == "edit" else None
        own = blank_to_none(choice.comment)
        item.comment = own if own is not None else (comment if choice.action != "approve" else None)
        resume_items.append(
            {
                "id": item.item_id,
                "action": item.action,
                "data": item.decided_data if item.action == "edit" else item.data,
                "comment": item.comment,
            }
        )
    resume = {"hold_id": hold.public_id, "resolved_by": "human", "items": resume_items, "comment": comment}
    event = AuditEvent(
        kind="hold.decided",
        actor=actor.label,
        run_id_ref=hold.run_id,
        hold_id_ref=hold.pk,
        data={"actions": {i["id"]: i["action"] for i in resume_items}, "comment": comment},
    )
    stamp = {
        "status": Hold.Status.DECIDED.value,
        "decided_at": timezone.now(),
        "decided_by": actor.label,
        "decided_by_user_id": actor.user.pk if actor.kind == "user" else None,
        "decided_by_account_id": actor.account.pk if actor.kind == "account" else None,
        "comment": comment,
    }
    resume_invocation = _write_decision(hold, items, stamp, resume, event)
    if resume_invocation is None:
        # Another decider or the sweep got there first, or the clock passed expires_at.
        fresh = Hold.objects.get(pk=hold.pk)
        if fresh.status == Hold.Status.PENDING:
            fresh.status = Hold.Status.EXPIRED
        raise hold_refusal(fresh)
    _publish_on_commit([resume_invocation])
    hold.status, hold.decided_at, hold.decided_by, hold.comment = (
        stamp[k] for k in ("status", "decided_at", "decided_by", "comment")
    )
    return hold


def _write_decision(
    hold: Hold, items: list[HoldItem], stamp: dict, resume: dict, event: AuditEvent
) -> Invocation | None:
    """Takes the hold for this decision and writes everything it decides, in one transaction: the
    hold's `stamp` (status, decider, time, comment), the per-item decisions, the -1 pending count,
    the resume invocation (returned) and the audit event. None: the hold was not pending any more,
    or its expires_at had passed by the database's clock, and nothing was written.

    On PostgreSQL that is one round trip (_transaction) of two statements. The first is the
    conditional UPDATE: a concurrent decision or sweep waits on its row lock and then updates
    nothing. The second writes the rest only where the first won (the hold carries this decision's
    stamp and has no resume yet), and reads the asker for the resume's seq and status with its own,
    newer snapshot, so that an asker which answered while the first waited is seen as answered. Its
    text is the same for 1 and 100 items (one array per column); the ORM needs six round trips and
    builds a CASE per field and item for the items.
    """
    if connection.vendor != "postgresql":
        pending = Q(pk=hold.pk, status=Hold.Status.PENDING) & (Q(expires_at__isnull=True) | Q(expires_at__gt=Now()))
        with transaction.atomic():
            if Hold.objects.filter(pending).update(**stamp) != 1:
                return None
            HoldItem.objects.bulk_update(items, ["action", "decided_data", "comment"])
            PendingCount.objects.create(capability_id=hold.capability_id, delta=-1)
            asker = Invocation.objects.filter(pk=hold.invocation_id).values_list("seq", "status").get()
            invocation = _resume_invocation(run_id=hold.run_id, hold_id=hold.pk, asker=asker, resume=resume)
            invocation.save(force_insert=True)
            event.invocation_id_ref = invocation.id
            event.save(force_insert=True)
        return invocation
    # seq, status and next_attempt_at are placeholders here: the statement sets them from the asker.
    invocation = _resume_invocation(run_id=hold.run_id, hold_id=hold.pk, asker=(0, ""), resume=resume)
    event.invocation_id_ref = invocation.id
    stamped = ", ".join(f"{column} = %({column})s" for column in stamp)
    decided = HoldItem._meta.get_field("decided_data")
    params = {
        **stamp,
        "hold": hold.pk,
        "capability": hold.capability_id,
        "item_ids": [item.pk for item in items],
        "actions": [item.action for item in items],
        "decided_data": [decided.get_prep_value(item.decided_data) for item in items],
        "comments": [item.comment for item in items],
        "asker": hold.invocation_id,
        "now": timezone.now(),
        "live": [str(status) for status in LIVE_INVOCATION],
    }
    invocation_columns, values = _insert_values(invocation, skip=("seq", "status", "next_attempt_at"))
    params.update({f"r{n}": value for n, value in enumerate(values)})
    event_columns, values = _insert_values(event)
    params.update({f"a{n}": value for n, value in enumerate(values)})
    take = (
        f"UPDATE {Hold._meta.db_table} SET {stamped} WHERE id = %(hold)s AND status = 'pending'"
        " AND (expires_at IS NULL OR expires_at > STATEMENT_TIMESTAMP()) RETURNING id"
    )
    write = (
        f"WITH won AS (SELECT h.id FROM {Hold._meta.db_table} h WHERE h.id = %(hold)s AND h.status = %(status)s"
        " AND h.decided_at = %(decided_at)s AND h.decided_by = %(decided_by)s"
        f" AND NOT EXISTS (SELECT 1 FROM {Invocation._meta.db_table} x WHERE x.hold_id = h.id AND x.kind = 'resume')),"
        f" p AS (INSERT INTO {PendingCount._meta.db_table} (capability_id, delta) SELECT %(capability)s, -1 FROM won),"
        f" t AS (UPDATE {HoldItem._meta.db_table} AS t SET action = v.action, decided_data = v.decided_data,"
        " comment = v.comment FROM won, unnest(%(item_ids)s::bigint[], %(actions)s::text[], %(decided_data)s::text[],"
        " %(comments)s::text[]) AS v(id, action, decided_data, comment) WHERE t.id = v.id),"
        f" asker AS (SELECT x.seq, x.status FROM {Invocation._meta.db_table} x, won WHERE x.id = %(asker)s),"
        f" r AS (INSERT INTO {Invocation._meta.db_table}"
        f" ({', '.join(invocation_columns)}, seq, status, next_attempt_at)"
        f" SELECT {', '.join(f'%(r{n})s' for n in range(len(invocation_columns)))}, asker.seq + 1, w.status,"
        " CASE WHEN w.status = 'pending' THEN %(now)s::timestamptz END FROM asker,"
        " LATERAL (SELECT CASE WHEN asker.status = ANY(%(live)s) THEN 'waiting' ELSE 'pending' END AS status) AS w"
        " RETURNING seq, status, next_attempt_at),"
        f" a AS (INSERT INTO {AuditEvent._meta.db_table} ({', '.join(event_columns)})"
        f" SELECT {', '.join(f'%(a{n})s' for n in range(len(event_columns)))} FROM won)"
        " SELECT seq, status, next_attempt_at FROM r"
    )
    taken, written = _transaction([take, write], params)
    if not taken:
        return None
    invocation.seq, invocation.status, invocation.next_attempt_at = written[0]
    invocation._state.adding = False
    return invocation


def _resume_invocation(*, run_id: int, hold_id: int, asker: tuple[int, str], resume: dict) -> Invocation:
    """The resume outbox row of a hold. It takes the seq after its asker's, and it waits while the
    asker has not answered yet (SPEC: a resume is sent only after the ask's invocation answered).
    The run's own seq moves on when the resume is first sent (invocation_claim)."""
    seq, asker_status = asker
    status = Invocation.Status.WAITING if asker_status in LIVE_INVOCATION else Invocation.Status.PENDING
    invocation = Invocation(run_id=run_id, kind="resume", seq=seq + 1, status=status, hold_id=hold_id, resume=resume)
    invocation.token_hash = run_token_hash(invocation.id)
    if status == Invocation.Status.PENDING:
        invocation.next_attempt_at = timezone.now()
    return invocation


def due_holds():
    """Pending holds past their expiry, soonest first (the partial index hold_sweep_due)."""
    return Hold.objects.filter(status=Hold.Status.PENDING, expires_at__lte=Now()).order_by("expires_at")


@dataclass(frozen=True)
class Expired:
    """A hold that a sweep batch expired, and the resume it wrote for it."""

    hold_id: int
    capability_id: int
    invocation_id: str
    status: str  # of the resume: pending, or waiting while the asker is still answering


def holds_expire_due(*, limit: int | None = None) -> int:
    """One sweep batch; returns how many holds it expired (0: nothing is due)."""
    return len(holds_expire_batch(limit=limit))


def holds_expire_batch(*, limit: int | None = None) -> list[Expired]:
    """One sweep batch: due pending holds become expired, each with its resume, in one transaction.

    Rows are claimed with FOR UPDATE SKIP LOCKED (where the database has it) and the UPDATE
    re-checks `pending`, so two sweepers or a sweeper and a person never both win a hold. A hold
    whose asker is recording its answer right now is locked by that answer, skipped, and swept
    next time; otherwise the answer waits for this commit and then sees the resume it must release.
    Safe to run twice or concurrently: a hold that is no longer pending is neither locked nor written.
    """
    limit = limit or settings.RQ_SWEEP_BATCH
    with transaction.atomic():
        due = due_holds()
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        hold_ids = list(due.values_list("pk", flat=True)[:limit])
        if not hold_ids:
            return []
        # The writes are a second statement, not part of the locking one: a statement reads with the
        # snapshot it started with, and the askers' statuses must be read after the locks are held.
        # An answer that committed between that start and the lock on its hold would otherwise look
        # still in flight, and the resume would wait for an answer that has already come.
        if connection.vendor == "postgresql":
            expired = _expire_locked_sql(hold_ids)
        else:
            expired = _expire_locked_orm(hold_ids)
        due_now = [e.invocation_id for e in expired if e.status == Invocation.Status.PENDING]
        if due_now:
            transaction.on_commit(lambda: outbox.publish(due_now))
    return expired


def _expired_resume(hold_id: int) -> dict:
    return {"hold_id": f"h_{hold_id}", "resolved_by": "expired", "items": [], "comment": None}


def _expire_locked_orm(hold_ids: list[int]) -> list[Expired]:
    """The sweep's writes through the ORM (SQLite, which `make run` uses). The holds are locked."""
    rows = list(
        Hold.objects.filter(pk__in=hold_ids, status=Hold.Status.PENDING)
        .order_by("expires_at")
        .values_list("pk", "run_id", "invocation_id", "expires_at", "capability_id")
    )
    askers = {
        pk: (seq, status)
        for pk, seq, status in Invocation.objects.filter(pk__in=[row[2] for row in rows]).values_list(
            "pk", "seq", "status"
        )
    }
    now = timezone.now()
    Hold.objects.filter(pk__in=[row[0] for row in rows], status=Hold.Status.PENDING).update(
        status=Hold.Status.EXPIRED, decided_at=now, decided_by="expired"
    )
    invocations = [
        _resume_invocation(run_id=run_id, hold_id=hold_pk, asker=askers[asker_id], resume=_expired_resume(hold_pk))
        for hold_pk, run_id, asker_id, _, _ in rows
    ]
    Invocation.objects.bulk_create(invocations)
    per_capability = Counter(row[4] for row in rows)
    PendingCount.objects.bulk_create(PendingCount(capability_id=c, delta=-n) for c, n in per_capability.items())
    AuditEvent.objects.bulk_create(
        AuditEvent(
            kind="hold.expired",
            actor=SYSTEM.label,
            run_id_ref=run_id,
            hold_id_ref=hold_pk,
            invocation_id_ref=inv.id,
            data={"expires_at": expires_at.isoformat()},
        )
        for (hold_pk, run_id, _, expires_at, _), inv in zip(rows, invocations, strict=True)
    )
    return [
        Expired(hold_id=row[0], capability_id=row[4], invocation_id=inv.id, status=inv.status)
        for row, inv in zip(rows, invocations, strict=True)
    ]


# The sweep's writes on PostgreSQL as one statement: the holds' UPDATE, their resume invocations,
# their audit rows and the pending counters' -n per capability, which is what the ORM path writes,
# row for row (a test compares the two). Doing it set-based removes 3,000 Python objects and two
# round trips of 1,000 rows per batch.
# - The invocation id is made as new_invocation_id makes it: `inv_`, the milliseconds of `now` in 12
#   hex digits, and 8 random bytes, taken from the fully random bytes of two version-4 UUIDs
#   (gen_random_uuid reads the strong random source).
# - The token hash is auth.run_token_hash, spelt in SQL (auth.RUN_TOKEN_HASH_SQL).
# - The resume text is json.dumps of _expired_resume; the audit's expires_at is datetime.isoformat.
# `resumes` is MATERIALIZED so that each row's random id is drawn once and read by both INSERTs.
EXPIRE_LOCKED_SQL = (
    """
WITH expired AS (
    UPDATE holds_hold SET status = 'expired', decided_at = %(now)s, decided_by = 'expired'
    WHERE id = ANY(%(hold_ids)s::bigint[]) AND status = 'pending'
    RETURNING id, run_id, invocation_id, capability_id, expires_at
), resumes AS MATERIALIZED (
    SELECT e.id, e.run_id, e.capability_id, e.expires_at, asker.seq + 1 AS seq,
           CASE WHEN asker.status IN ('pending', 'delivering') THEN 'waiting' ELSE 'pending' END AS status,
           'inv_' || lpad(to_hex(floor(extract(epoch FROM %(now)s::timestamptz) * 1000)::bigint), 12, '0')
           || encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6)
                     || substring(uuid_send(gen_random_uuid()) FROM 11 FOR 2), 'hex') AS invocation_id
    FROM expired e JOIN holds_invocation asker ON asker.id = e.invocation_id
), resume_rows AS (
    INSERT INTO holds_invocation (id, run_id, kind, seq, status, token_hash, resume, hold_id, attempts,
                                  next_attempt_at, last_error, created_at)
    SELECT invocation_id, run_id, 'resume', seq, status, """
    + RUN_TOKEN_HASH_SQL.format(id="invocation_id")
    + """,
           '{"hold_id": "h_' || id || '", "resolved_by": "expired", "items": [], "comment": null}',
           id, 0, CASE WHEN status = 'pending' THEN %(now)s END, '', %(now)s
    FROM resumes
), audit_rows AS (
    INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
    SELECT %(now)s, %(actor)s, 'hold.expired', run_id, id, invocation_id, jsonb_build_object('expires_at',
           to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN extract(microseconds FROM expires_at) %% 1000000 = 0 THEN ''
                   ELSE to_char(expires_at AT TIME ZONE 'UTC', '.US') END
           || '+00:00')
    FROM resumes
), pending_counts AS (
    INSERT INTO holds_pendingcount (capability_id, delta)
    SELECT capability_id, -count(*) FROM expired GROUP BY capability_id
)
SELECT id, capability_id, invocation_id, status FROM resumes
"""
)


def _expire_locked_sql(hold_ids: list[int]) -> list[Expired]:
    """The sweep's writes on PostgreSQL, in one statement (EXPIRE_LOCKED_SQL). The holds are locked."""
    params = {"hold_ids": hold_ids, "now": timezone.now(), "actor": SYSTEM.label, **run_token_sql_params()}
    with connection.cursor() as cursor:
        cursor.execute(EXPIRE_LOCKED_SQL, params)
        return [Expired(*row) for row in cursor.fetchall()]


# --- invocations (delivery) --------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    invocation: Invocation
    attempt: int


def invocation_claim(*, invocation_id: str) -> Claim | None:
    """A worker claims a due invocation before it sends it (None: not due, or someone else has it).

    The claim is one conditional UPDATE with a lease, so a worker that dies mid-send leaves a row
    the relay hands out again once the lease ends; the agent sees the same webhook-id again. Two
    workers racing for one row both run the UPDATE; PostgreSQL re-checks the WHERE clause of the
    second against the first one's result, so only one of them gets a row back. The same statement
    moves a held run on to its resume and returns what the send needs (run, capability), so a
    claim is one round trip, BEGIN and COMMIT included (_transaction).
    """
    if connection.vendor != "postgresql":
        return _invocation_claim_orm(invocation_id=invocation_id)
    now = timezone.now()
    # A claim lost in a database crash only means a second send with the same webhook-id, which
    # delivery is built for; not waiting for the disk halves the cost of a send.
    _, claimed = _transaction(
        ["SET LOCAL synchronous_commit TO OFF", _CLAIM_SQL],
        {"id": invocation_id, "now": now, "grace": float(settings.RQ_LEASE_GRACE)},
    )
    if not claimed:
        return None
    row = claimed[0]
    invocation, run = rows.with_run(*rows.build(_CLAIM_COLUMNS, row))
    moved = row[-1]
    if invocation.status == Invocation.Status.PARKED:
        return None
    if moved:
        # A run is held from its suspended answer until its resume is first sent; from then on
        # the resume is the run's current invocation.
        run.status, run.seq = Run.Status.RUNNING, invocation.seq
    return Claim(invocation=invocation, attempt=invocation.attempts)


# What a send reads, in the order _CLAIM_SQL returns it; any other field loads on first use.
_CLAIM_COLUMNS = (
    rows.Columns(
        Invocation,
        "i",
        ["id", "run_id", "kind", "seq", "status", "resume", "hold_id", "attempts", "next_attempt_at", "lease_until"]
        + ["first_sent_at"],
    ),
    rows.Columns(Run, "r", ["id", "capability_id", "version", "endpoint", "status", "seq", "input"]),
    rows.Columns(
        Capability, "c", ["id", "name", "secret", "timeout_seconds", "endpoint_disabled_at", "endpoint_stalled_at"]
    ),
)
_CLAIM_SQL = f"""
WITH claimed AS (
    UPDATE holds_invocation AS i
    SET status = CASE WHEN c.endpoint_disabled_at IS NULL THEN 'delivering' ELSE 'parked' END,
        lease_until = CASE WHEN c.endpoint_disabled_at IS NULL
                           THEN %(now)s + make_interval(secs => c.timeout_seconds + %(grace)s) END,
        attempts = i.attempts + CASE WHEN c.endpoint_disabled_at IS NULL THEN 1 ELSE 0 END,
        first_sent_at = CASE WHEN c.endpoint_disabled_at IS NULL
                             THEN COALESCE(i.first_sent_at, %(now)s) ELSE i.first_sent_at END
    FROM holds_run AS r JOIN holds_capability AS c ON c.id = r.capability_id
    WHERE i.id = %(id)s AND r.id = i.run_id
      AND ((i.status = 'pending' AND i.next_attempt_at <= %(now)s)
           OR (i.status = 'delivering' AND i.lease_until < %(now)s))
    RETURNING {", ".join(c.select(named=True) for c in _CLAIM_COLUMNS)}
), moved AS (
    -- claimed is one row at most; as a scalar it is looked up by the run's key (joined, the planner
    -- preferred to scan every held run and filter them against it).
    UPDATE holds_run AS r SET status = 'running', seq = (SELECT i_seq FROM claimed)
    WHERE r.id = (SELECT i_run_id FROM claimed WHERE i_kind = 'resume' AND i_status = 'delivering')
      AND r.status = 'held'
    RETURNING r.id
)
SELECT claimed.*, EXISTS (SELECT 1 FROM moved) FROM claimed
"""


def _invocation_claim_orm(*, invocation_id: str) -> Claim | None:
    """invocation_claim for databases other than PostgreSQL (development on SQLite)."""
    now = timezone.now()
    with transaction.atomic():
        invocation = (
            Invocation.objects.select_related("run", "run__capability")
            .filter(pk=invocation_id)
            .filter(
                Q(status=Invocation.Status.PENDING, next_attempt_at__lte=now)
                | Q(status=Invocation.Status.DELIVERING, lease_until__lt=now)
            )
            .first()
        )
        if invocation is None:
            return None
        capability = invocation.run.capability
        if capability.endpoint_disabled_at is not None:
            Invocation.objects.filter(pk=invocation.pk, status=invocation.status).update(
                status=Invocation.Status.PARKED, lease_until=None
            )
            return None
        lease = now + timedelta(seconds=capability.timeout_seconds + settings.RQ_LEASE_GRACE)
        won = Invocation.objects.filter(
            pk=invocation.pk, status=invocation.status, attempts=invocation.attempts
        ).update(
            status=Invocation.Status.DELIVERING,
            lease_until=lease,
            attempts=F("attempts") + 1,
            first_sent_at=invocation.first_sent_at or now,
        )
        if won != 1:
            return None
        if invocation.kind == Invocation.Kind.RESUME and invocation.run.status == Run.Status.HELD:
            Run.objects.filter(pk=invocation.run_id, status=Run.Status.HELD).update(
                status=Run.Status.RUNNING, seq=invocation.seq
            )
            invocation.run.status, invocation.run.seq = Run.Status.RUNNING, invocation.seq
        invocation.status, invocation.lease_until = Invocation.Status.DELIVERING, lease
        invocation.attempts += 1
        invocation.first_sent_at = invocation.first_sent_at or now
        return Claim(invocation=invocation, attempt=invocation.attempts)


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to; `delivery.py` classifies the HTTP result into this."""

    kind: str  # "answer" | "retry" | "fatal" | "gone"
    answer: dict | None = None
    status_code: int | None = None
    error: str = ""
    retry_after: float | None = None
    latency_ms: int = 0
    started_at: object = None
    timed_out: bool = False  # no answer within the capability's timeout: the endpoint is stalled


def invocation_record(*, invocation_id: str, attempt: int, outcome: Outcome) -> str:
    """Records one attempt and moves the invocation (and its run and hold) on. Returns the result.

    Only the worker holding the claim for this attempt may record it; a stale worker (whose lease
    ran out and whose row was handed to another) records nothing.
    """
    # The writes after the locks travel together, with the COMMIT (prepared.deferred): recording an
    # answer is three round trips on PostgreSQL (psycopg's BEGIN, the locks, the writes).
    with transaction.atomic(), prepared.deferred():
        locked = _lock_claimed(invocation_id=invocation_id, attempt=attempt)
        if locked is None:
            return "stale"
        invocation, run, asked = locked
        result = _apply_outcome(invocation, run, asked, outcome)
        _write_attempt(invocation=invocation, attempt=attempt, outcome=outcome, result=result)
        _note_stall(run, invocation, outcome)
    return result


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
            event, details = "capability.endpoint_stalled", {"reason": outcome.error}
    elif outcome.status_code is not None and capability.endpoint_stalled_at is not None:
        cleared = Capability.objects.filter(pk=capability.pk, endpoint_stalled_at__isnull=False).update(
            endpoint_stalled_at=None, endpoint_probe_until=None
        )
        event = "capability.endpoint_answering" if cleared else None
    if event:
        audit(event, SYSTEM, run_id=run.pk, invocation_id=invocation.id, capability=capability.name, **details)


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
    return "deferred"


# What recording an answer reads, in the order _LOCK_SQL returns it; any other field loads on use.
_LOCK_COLUMNS = (
    rows.Columns(
        Invocation,
        "i",
        ["id", "run_id", "kind", "seq", "status", "hold_id", "attempts", "next_attempt_at", "lease_until"]
        + ["answered_at", "answer", "last_error"],
    ),
    rows.Columns(
        Run,
        "r",
        ["id", "capability_id", "version", "endpoint", "status", "seq", "error", "parent_id"] + ["finished_at"],
    ),
    rows.Columns(
        Capability,
        "c",
        ["id", "name", "output_schema", "timeout_seconds", "endpoint_disabled_at", "endpoint_stalled_at"],
    ),
)


# The row lock on the invocation, then on its run, in one statement. NO KEY locks (no key changes): they
# still order every writer of the run, but not a decision or sweep inserting the run's resume (whose
# foreign key takes KEY SHARE on the run while it holds the hold's lock that this answer waits for).
_LOCK_SQL = f"""
SELECT {", ".join(c.select() for c in _LOCK_COLUMNS)}
FROM holds_invocation AS i JOIN holds_run AS r ON r.id = i.run_id JOIN holds_capability AS c ON c.id = r.capability_id
WHERE i.id = %(id)s AND i.status = 'delivering' AND i.attempts = %(attempt)s
FOR NO KEY UPDATE OF i, r
"""


# The hold the locked invocation asked (its latest), locked in turn; only its id and status are read.
_LOCK_ASKED_SQL = """
SELECT id, status FROM holds_hold WHERE invocation_id = %(id)s
  AND EXISTS (SELECT 1 FROM holds_invocation WHERE id = %(id)s AND status = 'delivering' AND attempts = %(attempt)s)
ORDER BY id DESC LIMIT 1 FOR UPDATE
"""


def _lock_claimed(*, invocation_id: str, attempt: int) -> tuple[Invocation, Run, Hold | None] | None:
    """Locks a claimed invocation and its run for recording its answer, then the hold it asked, if
    any (a decision or the sweep holds that lock while it creates a resume, so the answer sees that
    resume rather than racing past it). None: the claim is stale. One round trip on PostgreSQL."""
    if connection.vendor != "postgresql":
        invocation = (
            Invocation.objects.select_for_update(no_key=True)
            .filter(pk=invocation_id, status=Invocation.Status.DELIVERING, attempts=attempt)
            .first()
        )
        if invocation is None:
            return None
        run = Run.objects.select_for_update(no_key=True, of=("self",)).select_related("capability")
        run = run.get(pk=invocation.run_id)
        asked = Hold.objects.select_for_update().filter(invocation=invocation).order_by("-pk")
        return invocation, run, asked.only("id", "status").first()
    locked, asked = _transaction(
        [_LOCK_SQL, _LOCK_ASKED_SQL], {"id": invocation_id, "attempt": attempt}, savepoint=False
    )
    if not locked:
        return None
    invocation, run = rows.with_run(*rows.build(_LOCK_COLUMNS, locked[0]))
    return invocation, run, (Hold.from_db(connection.alias, ["id", "status"], list(asked[0])) if asked else None)


_ATTEMPT_SQL = """
WITH attempt AS (
    INSERT INTO holds_deliveryattempt (invocation_id, number, started_at, latency_ms, status_code, outcome, error)
    VALUES (%(invocation)s, %(attempt)s, %(started_at)s, %(latency_ms)s, %(status_code)s, %(result)s, %(error)s)
)
INSERT INTO holds_auditevent (at, actor, kind, run_id_ref, hold_id_ref, invocation_id_ref, data)
VALUES (%(at)s, %(actor)s, 'invocation.attempt', %(run)s, NULL, %(invocation)s, %(data)s::jsonb)
"""


def _write_attempt(*, invocation: Invocation, attempt: int, outcome: Outcome, result: str) -> None:
    """The attempt row and its audit event (one statement on PostgreSQL: they always go together)."""
    started_at = outcome.started_at or timezone.now()
    data = {
        "attempt": attempt,
        "status_code": outcome.status_code,
        "result": result,
        "error": (outcome.error or "")[:200],
    }
    if connection.vendor != "postgresql":
        DeliveryAttempt.objects.create(
            invocation=invocation,
            number=attempt,
            started_at=started_at,
            latency_ms=outcome.latency_ms,
            status_code=outcome.status_code,
            outcome=result,
            error=(outcome.error or "")[:500],
        )
        audit("invocation.attempt", SYSTEM, run_id=invocation.run_id, invocation_id=invocation.id, **data)
        return
    prepared.write(
        (
            _ATTEMPT_SQL,
            {
                "invocation": invocation.id,
                "attempt": attempt,
                "started_at": started_at,
                "latency_ms": outcome.latency_ms,
                "status_code": outcome.status_code,
                "result": result,
                "error": (outcome.error or "")[:500],
                "at": timezone.now(),
                "actor": SYSTEM.label,
                "run": invocation.run_id,
                "data": json.dumps(data),
            },
        )
    )


def _apply_outcome(invocation: Invocation, run: Run, asked: Hold | None, outcome: Outcome) -> str:
    if outcome.kind == "answer":
        return _apply_answer(invocation, run, outcome.answer, asked)
    if outcome.kind == "gone":
        Capability.objects.filter(pk=run.capability_id).update(endpoint_disabled_at=timezone.now())
        _set_invocation(invocation, Invocation.Status.PARKED, error=outcome.error)
        audit(
            "capability.endpoint_disabled",
            SYSTEM,
            run_id=run.pk,
            invocation_id=invocation.id,
            capability=run.capability.name,
            reason="the agent answered 410 Gone",
        )
        return "parked"
    if outcome.kind == "fatal":
        _set_invocation(invocation, Invocation.Status.FAILED, error=outcome.error)
        _finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=outcome.error)
        return "failed"
    # A failed attempt. After an ask it counts as the suspended answer on that hold: retrying
    # would re-run an agent that already put its question to a person.
    if asked is not None:
        return _apply_answer(
            invocation, run, {"status": "suspended", "hold_id": asked.public_id}, asked, note=outcome.error
        )
    schedule = settings.RQ_RETRY_SCHEDULE
    if invocation.attempts >= len(schedule):
        _set_invocation(invocation, Invocation.Status.UNDELIVERABLE, error=outcome.error)
        return "undeliverable"
    delay = schedule[invocation.attempts] * random.uniform(0.8, 1.2)
    if outcome.retry_after is not None:
        delay = max(delay, outcome.retry_after)
    invocation.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    _set_invocation(invocation, Invocation.Status.PENDING, error=outcome.error)
    return "retry"


def _set_invocation(invocation: Invocation, status: str, *, error: str = "", answer=None) -> None:
    invocation.status = status
    invocation.lease_until = None
    invocation.last_error = (error or "")[:2000]
    if answer is not None:
        invocation.answer = answer
        invocation.answered_at = timezone.now()
    if connection.vendor != "postgresql":
        invocation.save(
            update_fields=["status", "lease_until", "last_error", "answer", "answered_at", "next_attempt_at"]
        )
        return
    # The same UPDATE as save(update_fields=...), without building it through the ORM on every answer.
    prepared.write(
        (
            "UPDATE holds_invocation SET status = %s, lease_until = NULL, last_error = %s, answer = %s,"
            " answered_at = %s, next_attempt_at = %s WHERE id = %s",
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
        errors = _schema_errors(run.capability.output_schema, answer.get("output"), "output")
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        if errors:
            reason = "the agent's output does not match the output schema: " + "; ".join(
                f"{e['field']}: {e['message']}" for e in errors
            )
            _finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=reason)
            return "failed"
        _finish_run(run, status=Run.Status.COMPLETED, actor=SYSTEM, output=answer.get("output"))
        return "answered"
    if status == "failed":
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        _finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=str(answer.get("error") or "failed"))
        return "answered"
    # suspended: it must name the hold that this invocation asked, whatever its status now.
    hold_id = answer.get("hold_id")
    if asked is None or hold_id != asked.public_id:
        _set_invocation(invocation, Invocation.Status.ANSWERED, answer=answer)
        reason = f"the agent answered suspended on {hold_id!r}, but this invocation asked " + (
            f"{asked.public_id}" if asked else "no hold"
        )
        _finish_run(run, status=Run.Status.FAILED, actor=SYSTEM, error=reason)
        return "failed"
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
        transaction.on_commit(lambda: outbox.publish(released))
    elif asked.status == Hold.Status.PENDING:
        # Reviewers hear about a hold once its run is held on it: after the commit, and a failing
        # notification fails nothing here. (A hold already decided or expired needs nobody.)
        notifications.hold_asked(asked.pk)
    audit("run.held", SYSTEM, run_id=run.pk, hold_id=asked.pk, invocation_id=invocation.id, note=note)
    return "answered"


def invocation_retry(*, invocation_id: str, actor: Actor) -> Invocation:
    """An admin sends an undeliverable invocation again, with a fresh schedule."""
    if not actor.is_admin:
        raise Forbidden("only admins may retry a delivery")
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
        audit("invocation.retried", actor, run_id=invocation.run_id, invocation_id=invocation.id)
        _publish_on_commit([invocation])
    return invocation


def capability_enable(*, capability_id: int, actor: Actor) -> Capability:
    """An admin enables an endpoint that answered 410: parked invocations are due again."""
    if not actor.is_admin:
        raise Forbidden("only admins may enable an endpoint")
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
        audit("capability.endpoint_enabled", actor, capability=capability.name, released=len(parked))
        transaction.on_commit(lambda: outbox.publish(parked))
    return capability


def invocations_due(*, limit: int = 500) -> list[str]:
    """The relay's query: outbox rows due now, and claims whose lease ran out (a dead worker)."""
    return list(due_invocations().values_list("pk", flat=True)[:limit])


def due_invocations():
    """Outbox rows due now, and claims whose lease ran out (the partial index invocation_outbox_due)."""
    now = timezone.now()
    return Invocation.objects.filter(
        Q(status=Invocation.Status.PENDING, next_attempt_at__lte=now)
        | Q(status=Invocation.Status.DELIVERING, lease_until__lt=now)
    ).order_by("next_attempt_at")


# --- run state and files -----------------------------------------------------------------------


def run_state_put(*, run: Run, key: str, value, actor: Actor) -> None:
    RunState.objects.update_or_create(run=run, key=key, defaults={"value": value})


def run_state_delete(*, run: Run, key: str, actor: Actor) -> bool:
    deleted, _ = RunState.objects.filter(run=run, key=key).delete()
    return deleted > 0


def run_file_add(*, run: Run, name: str, content_type: str, content, size: int, sha256: str, actor: Actor) -> RunFile:
    with transaction.atomic():
        run_file = RunFile(run=run, name=name, content_type=content_type, size=size, sha256=sha256)
        run_file.file.save(name, content, save=False)
        run_file.save()
        audit("file.uploaded", actor, run_id=run.pk, file=run_file.public_id, name=name, size=size, sha256=sha256)
    return run_file


# --- capabilities, people and service accounts ------------------------------------------------

DEFAULTS = {
    "version": "1",
    "timeout_seconds": 30.0,
    "input_schema": None,
    "output_schema": None,
    "approvers": ["admin", "member"],
    "self_approval": True,
    "notify": {},
}


def capabilities_sync(*, specs, actor: Actor) -> list[tuple[str, bool, str | None]]:
    """Writes capabilities read from agentos.yaml, all or nothing. Safe to run twice.

    Keys the file sets overwrite what admins changed; keys it leaves out fall back to defaults.
    A secret is generated once, when the file has none and the capability is new.
    Returns (name, created, generated secret or None) per capability.
    """
    from .config import new_secret

    results = []
    with transaction.atomic():
        for spec in specs:
            values = {**DEFAULTS, **spec.values}
            capability = Capability.objects.select_for_update().filter(name=spec.name).first()
            created = capability is None
            generated = None
            if created:
                capability = Capability(name=spec.name)
                if "secret" not in spec.values:
                    generated = values["secret"] = new_secret()
            before = {key: getattr(capability, key) for key in values} if not created else {}
            for key, value in values.items():
                setattr(capability, key, value)
            capability.from_file = sorted(spec.values)
            capability.save()
            changed = sorted(k for k in values if k != "secret" and before.get(k) != values[k]) if before else []
            if created or changed:
                audit("capability.synced", actor, capability=spec.name, created=created, changed=changed)
            results.append((spec.name, created, generated))
    return results


def person_add(*, username: str, role: str, password: str | None, actor: Actor, email: str = ""):
    from django.contrib.auth import get_user_model

    from .models import Membership

    _require_admin(actor)
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username, defaults={"email": email})
        if password:
            user.set_password(password)
        user.is_staff = role == "admin"
        user.save()
        Membership.objects.update_or_create(user=user, defaults={"role": role})
        audit("person.added" if created else "person.changed", actor, username=username, role=role)
    return user


def service_account_create(*, name: str, role: str, actor: Actor):
    from .auth import new_service_key
    from .models import ServiceAccount

    _require_admin(actor)
    key, key_hash, prefix = new_service_key()
    with transaction.atomic():
        account = ServiceAccount.objects.create(name=name, role=role, key_hash=key_hash, key_prefix=prefix)
        audit("service_account.created", actor, name=name, role=role)
    return account, key


def _require_admin(actor: Actor) -> None:
    if not actor.is_admin and actor is not SYSTEM:
        raise Forbidden("only admins manage people, service accounts and approvers")


def person_set_role(*, user_id: int, role: str, actor: Actor) -> None:
    from .models import Membership, Role

    _require_admin(actor)
    if role not in Role.values:
        raise Invalid([{"field": "role", "message": f"one of {', '.join(Role.values)}"}])
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(user_id=user_id).select_related("user").first()
        if membership is None:
            raise NotFound("no such person")
        before = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        membership.user.is_staff = role == "admin"
        membership.user.save(update_fields=["is_staff"])
        audit("person.role_changed", actor, username=membership.user.username, before=before, after=role)


def person_set_active(*, user_id: int, active: bool, actor: Actor) -> None:
    from django.contrib.auth import get_user_model

    _require_admin(actor)
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if user is None:
            raise NotFound("no such person")
        if actor.kind == "user" and actor.user.pk == user.pk and not active:
            raise Conflict("you cannot deactivate yourself", code="self")
        before = user.is_active
        user.is_active = active
        user.save(update_fields=["is_active"])
        # No session clean-up needed: Django's auth backend refuses inactive users on their
        # very next request, so a deactivated person is signed out at once.
        audit(
            "person.activated" if active else "person.deactivated",
            actor,
            username=user.username,
            before=before,
            after=active,
        )


def service_account_set_role(*, account_id: int, role: str, actor: Actor) -> None:
    from .models import Role, ServiceAccount

    _require_admin(actor)
    if role not in Role.values:
        raise Invalid([{"field": "role", "message": f"one of {', '.join(Role.values)}"}])
    with transaction.atomic():
        account = ServiceAccount.objects.select_for_update().filter(pk=account_id).first()
        if account is None:
            raise NotFound("no such service account")
        before, account.role = account.role, role
        account.save(update_fields=["role"])
        audit("service_account.role_changed", actor, name=account.name, before=before, after=role)


def service_account_revoke(*, account_id: int, actor: Actor) -> None:
    from .models import ServiceAccount

    _require_admin(actor)
    with transaction.atomic():
        won = ServiceAccount.objects.filter(pk=account_id, revoked_at__isnull=True).update(revoked_at=timezone.now())
        account = ServiceAccount.objects.filter(pk=account_id).first()
        if account is None:
            raise NotFound("no such service account")
        if won != 1:
            raise Conflict(f"{account.name} is already revoked", code="revoked")
        audit("service_account.revoked", actor, name=account.name)


def capability_set_approvers(*, capability_id: int, approvers: list[str], self_approval: bool | None, actor: Actor):
    _require_admin(actor)
    if not approvers or any(a not in ("admin", "member") for a in approvers):
        raise Invalid([{"field": "approvers", "message": "a non-empty list of roles from admin, member"}])
    with transaction.atomic():
        capability = Capability.objects.select_for_update().filter(pk=capability_id).first()
        if capability is None:
            raise NotFound("no such capability")
        before = {"approvers": capability.approvers, "self_approval": capability.self_approval}
        capability.approvers = list(dict.fromkeys(approvers))
        if self_approval is not None:
            capability.self_approval = self_approval
        capability.save(update_fields=["approvers", "self_approval", "updated_at"])
        after = {"approvers": capability.approvers, "self_approval": capability.self_approval}
        audit("capability.approvers_changed", actor, capability=capability.name, before=before, after=after)
    return capability
