"""Decisions: a person or service account decides a hold, once; the resume goes with it."""

import json
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from ..auth import Actor, run_token_hash
from ..errors import Invalid, NotFound
from ..ids import HOLD, public_id
from ..models import Action, AuditEvent, AuditKind, Hold, HoldItem, Invocation, new_invocation_id
from ..policy import decide_refusal, hold_refusal, may_approve_for_quorum, quorum_of, require
from ..schemas import Asked, blank_to_none, validate_decision
from ..words import ActorKind
from . import gateway, ports, receipts, sql
from .gateway import insert_values, one_round_trip
from .quorum import approve, is_approval, state

# How far behind this host's clock a worker's may be and still find a resume due the moment it is published.
CLOCK_SLACK = timedelta(seconds=1)


def _hold_to_decide(hold_id: int, resume_id: str | None) -> tuple[Hold | None, list[HoldItem]]:
    """The hold with its capability, run and items, read in the round trip that opens the decision's
    transaction, with the lock its resume's claim waits on (sql.LOCK_RESUME) when `resume_id` is given."""
    statement, columns = sql.DECIDE.parts()
    lock = [(sql.LOCK_RESUME, {"resume_lock": sql.resume_lock(resume_id)})] if resume_id else []
    found = gateway.read([*lock, (statement, [hold_id])])[-1]
    if not found:
        return None, []
    *head, item_columns = columns
    hold, hold.capability, hold.run = gateway.build(head, found[0])
    at = sum(len(part.fields) for part in head)  # where each row's item columns start
    return hold, [item_columns.build(row[at:]) for row in found if row[at] is not None]


def asked_items(hold: Hold, items: list[HoldItem]) -> dict[str, Asked]:
    """What a decision is checked against, item by item (the form runs the same check): the items still
    open, since those a rule or grant decided at the ask are not people's to decide."""
    return {
        item.item_id: Asked(data=item.data, actions=item.effective_actions(hold.actions), schema=item.schema)
        for item in items
        if not item.decided_by
    }


def hold_decide(
    *, hold_id: int, actor: Actor, body, fingerprint: str | None = None, by_confidence: list[str] | None = None
) -> Hold:
    """A person or service account decides a hold, once.

    The hold moves pending -> decided in one conditional UPDATE that also tests the database's
    now() against expires_at, in the transaction that writes the per-item decisions and the
    resume invocation. A second, replayed or concurrent decision updates 0 rows and gets 409.
    `by_confidence`: approved item ids that the page's approve-by-confidence set, kept in the audit event.

    A hold that needs a quorum (policy.quorum_of) takes an approval instead (services/quorum.py) and stays
    pending, with `hold.quorum_state` set, until the Nth approval of the same data decides it; a reject or
    feedback decides it at once. Every path (API, page, approve-all, by confidence, e-mail) comes here.

    One transaction of two round trips: the read of the hold, then the writes with the COMMIT
    (write_decision says why the resume's lock comes with the read). A refusal or an invalid body rolls
    it back: a third round trip.
    """
    resume_id = new_invocation_id()
    # Inside a caller's transaction the resume is published after that commits, so no claim waits for
    # this one and its lock would only fill the lock table of a caller that decides many holds.
    early = not connection.in_atomic_block
    receipts.current_key()  # made, or read once a minute, outside the decision's transaction
    with gateway.transaction():
        hold, items = _hold_to_decide(hold_id, resume_id if early else None)
        if hold is None:
            raise NotFound(f"hold {public_id(HOLD, hold_id)} does not exist")
        refusal = decide_refusal(actor, hold, fingerprint)
        if refusal is not None:
            raise refusal
        decision, errors = validate_decision(body, asked=asked_items(hold, items))
        if errors:
            raise Invalid(errors)
        quorum, approvals = quorum_of(hold), ()
        if quorum is not None and is_approval(decision):
            require(may_approve_for_quorum(actor, hold))
            approvals = approve(hold, actor, decision)
            if len(approvals) < quorum["approvals"]:
                hold.quorum_state = state(hold, quorum)
                return hold
            # The Nth approval of the same data: decided here, under the same row lock.
        if not early or approvals:
            # A quorum's last approval is published after the commit: its approval rows are written
            # already, and a decision that loses now must roll them back, not commit them.
            return _decide(hold, items, decision, actor, by_confidence, resume_id, None, approvals)
        # Published while it is written, so that the worker wakes meanwhile (write_decision). Due from
        # before the publish, less a second, so that a claim that comes at once finds it due even on a
        # host whose clock is a little behind this one.
        published_at = timezone.now() - CLOCK_SLACK
        return ports.publish_while(
            [resume_id],
            lambda: _decide(hold, items, decision, actor, by_confidence, resume_id, published_at, approvals),
        )


def _decide(hold, items, decision, actor: Actor, by_confidence, resume_id, published_at, approvals) -> Hold:
    """Writes the decision (a person's, or a quorum's whose last approval is `actor`'s) and its resume."""
    comment = blank_to_none(decision.comment)
    by_id = {d.id: d for d in decision.items}
    resume_items = []
    for item in items:
        choice = by_id.get(item.item_id)
        if choice is not None:
            item.action = choice.action
            item.decided_data = choice.data if choice.action == Action.EDIT else None
            own = blank_to_none(choice.comment)
            item.comment = own if own is not None else (comment if choice.action != Action.APPROVE else None)
        # else: a rule or grant decided it at the ask; the resume carries every item.
        resume_item = {
            "id": item.item_id,
            "action": item.action,
            "data": item.decided_data if item.action == Action.EDIT else item.data,
            "comment": item.comment,
        }
        if item.decided_by:
            resume_item["decided_by"] = item.decided_by
        resume_items.append(resume_item)
    resume = {"hold_id": hold.public_id, "resolved_by": "human", "items": resume_items, "comment": comment}
    event = AuditEvent(
        kind=AuditKind.HOLD_DECIDED,
        actor=actor.label,
        run_id_ref=hold.run_id,
        hold_id_ref=hold.pk,
        data={"actions": {i["id"]: i["action"] for i in resume_items}, "comment": comment},
    )
    if approvals:
        event.data["approvals"] = [a.label for a in approvals]
    if by_confidence:
        # Items that the page's approve-by-confidence set: calibration leaves them out.
        approved = {i["id"] for i in resume_items if i["action"] == Action.APPROVE}
        event.data["by_confidence"] = sorted(set(by_confidence) & approved)
    stamp = {
        "status": Hold.Status.DECIDED.value,
        "decided_at": timezone.now(),
        # A quorum's decision names everyone whose approval counted (the column holds 200 characters).
        "decided_by": ", ".join(a.label for a in approvals)[:200] if approvals else actor.label,
        "decided_by_user_id": actor.user.pk if actor.kind == ActorKind.USER else None,
        "decided_by_account_id": actor.account.pk if actor.kind == ActorKind.ACCOUNT else None,
        "comment": comment,
    }
    resume_invocation = write_decision(
        hold, items, stamp, resume, event, approvals, resume_id=resume_id, published_at=published_at
    )
    if resume_invocation is None:
        # Another decider or the sweep got there first, or the clock passed expires_at.
        fresh = Hold.objects.get(pk=hold.pk)
        if fresh.status == Hold.Status.PENDING:
            fresh.status = Hold.Status.EXPIRED
        raise hold_refusal(fresh)
    hold.status, hold.decided_at, hold.decided_by, hold.comment = (
        stamp[k] for k in ("status", "decided_at", "decided_by", "comment")
    )
    return hold


def write_decision(
    hold: Hold,
    items: list[HoldItem],
    stamp: dict,
    resume: dict,
    event: AuditEvent,
    approvals=(),
    *,
    resume_id: str | None = None,
    published_at: datetime | None = None,
) -> Invocation | None:
    """Takes the hold for this decision and writes everything it decides (sql.TAKE_HOLD, then
    sql.write_decision): the hold's `stamp`, the per-item decisions, the -1 pending count, the resume
    invocation (returned; its receipt signed here, so people's and rules' decisions both carry one; a
    quorum's `approvals` are each named in it) and the audit event. None: the
    hold was not pending any more, or its expires_at had passed by the database's clock, and nothing was
    written.

    The writes go in one round trip. A rule's decision joins the ask's transaction, and its resume is
    published after that commits (publish_on_commit, here), as is a person's inside a caller's
    transaction or a quorum's last approval. Otherwise a person's decision (hold_decide) passes the
    `resume_id` whose lock its transaction took with its read (sql.LOCK_RESUME), and `published_at`:
    the resume is being published meanwhile, and is due from then. The writes go with the COMMIT, and
    the worker wakes while the decision is built and written; its claim waits for the lock and then
    sees the committed resume. A message whose decision lost, or whose resume waits for its asker's
    answer, claims nothing (docs/decisions.md, "A decision's resume is published before its COMMIT")."""
    resume["receipt"] = receipts.for_decision(hold, items, stamp, resume, approvals)
    # seq, status and next_attempt_at are placeholders here: the statement sets them from the asker.
    invocation = Invocation(
        run_id=hold.run_id, kind=Invocation.Kind.RESUME, seq=0, status="", hold_id=hold.pk, resume=resume
    )
    if resume_id is not None:
        invocation.id = resume_id
    invocation.token_hash = run_token_hash(invocation.id)
    event.invocation_id_ref = invocation.id
    decided = HoldItem._meta.get_field("decided_data")
    params = {
        **stamp,
        "hold": hold.pk,
        "capability": hold.capability_id,
        "item_ids": [item.pk for item in items],
        "actions": [item.action for item in items],
        "decided_data": [decided.get_prep_value(item.decided_data) for item in items],
        "comments": [item.comment for item in items],
        "item_decided_by": [json.dumps(item.decided_by) if item.decided_by else None for item in items],
        "asker": hold.invocation_id,
        "now": published_at or timezone.now(),  # when the resume is due
    }
    invocation_columns, values = insert_values(invocation, skip=("seq", "status", "next_attempt_at"))
    params.update({f"r{n}": value for n, value in enumerate(values)})
    event_columns, values = insert_values(event)
    params.update({f"a{n}": value for n, value in enumerate(values)})
    take = sql.TAKE_HOLD.format(stamp=", ".join(f"{column} = %({column})s" for column in stamp))
    writes = [take, sql.write_decision(invocation_columns, event_columns)]
    if published_at is not None:
        taken, written = gateway.read(gateway.with_params(writes, params), commit=True)
    else:
        # No savepoint of their own: every caller's transaction (hold_decide's, a rule's) rolls back as a
        # whole when they fail.
        taken, written = one_round_trip(writes, params, savepoint=False)
    if not taken:
        return None
    invocation.seq, invocation.status, invocation.next_attempt_at = written[0]
    invocation._state.adding = False
    if published_at is None and invocation.status == Invocation.Status.PENDING:
        ports.publish_on_commit([invocation.id])
    return invocation
