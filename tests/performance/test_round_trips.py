"""The performance suite: tests that pin internals on purpose (round trips, statements per request,
SQL plans, prepared statements). Each number here is a cost that a benchmark measured
(docs/benchmarks.md); a change that moves one must say why in docs/benchmarks-notes.md. Behaviour
is tested elsewhere, through services and HTTP."""

import psycopg
import pytest
from django.db import connection

from holds import delivery, services
from holds.auth import actor_for_account
from holds.errors import Conflict
from holds.models import AuditEvent, DeliveryAttempt, Invocation, PendingCount, Run
from holds.services import receipts
from holds.services.gateway import one_round_trip
from tests import factories

pytestmark = pytest.mark.django_db


def _decided_resume(acap) -> Invocation:
    run, hold = factories.held_hold(acap)
    services.hold_decide(
        hold_id=hold.pk,
        actor=actor_for_account(factories.account("bot", role="member")[0]),
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]},
    )
    return Invocation.objects.get(hold=hold)


@pytest.mark.django_db(transaction=True)  # as in production: no test transaction around the ask
@pytest.mark.parametrize("n_items", [1, 100])
def test_one_ask_costs_one_statement_whatever_its_size(api, live, n_items, django_assert_num_queries):
    # PostgreSQL: the token's invocation and run, hold, items, audit and pending count in one statement.
    # Elsewhere: the token lookup, BEGIN, hold, items (one bulk INSERT), audit, count, COMMIT.
    with django_assert_num_queries(1):
        response = api.post("/v0/holds", factories.ask_body(n_items), token=live[2])
    assert response.status_code == 201


@pytest.mark.parametrize("n_items", [1, 100])
def test_one_decision_costs_the_same_queries_whatever_its_size(cap, n_items, django_assert_num_queries):
    from holds import services
    from holds.auth import actor_for_account

    _, hold = factories.held_hold(cap, factories.ask_body(n_items))
    robot = actor_for_account(factories.account("bot", role="member")[0])
    body = {"items": [{"id": item.item_id, "action": "approve"} for item in hold.items.all()]}
    # PostgreSQL: the lock its resume's claim waits on and the hold with capability, run and items; then
    # one round trip with the conditional UPDATE of the hold and one statement for items, pending count,
    # resume and audit row (inside this test's transaction: a savepoint and its release around both).
    # Elsewhere: the same read, the UPDATE, the items' bulk UPDATE, the count, the asker, the resume,
    # the audit row (and the savepoint pair).
    receipts.current_key()  # made on first use and cached: steady state signs without a query
    with django_assert_num_queries(4):
        services.hold_decide(hold_id=hold.pk, actor=robot, body=body)
    assert Invocation.objects.get(hold=hold).resume["items"][0]["action"] == "approve"


@pytest.mark.django_db(transaction=True)
def test_a_decision_alone_is_a_read_and_one_round_trip_and_a_lost_one_writes_nothing(cap, count_round_trips):
    from holds import services
    from holds.auth import actor_for_account

    _, hold = factories.held_hold(cap, factories.ask_body(3))
    robot = actor_for_account(factories.account("bot", role="member")[0])
    body = {"items": [{"id": f"INV-{n}", "action": "reject"} for n in (1, 2, 3)], "comment": "no"}
    receipts.current_key()  # made on first use and cached: steady state signs without a query
    with count_round_trips() as sent:
        services.hold_decide(hold_id=hold.pk, actor=robot, body=body)
    # BEGIN, the lock its resume's claim waits on (sql.LOCK_RESUME) and the read; then the conditional
    # UPDATE, the statement that writes the rest, and COMMIT.
    assert (sent.round_trips, sent.statements) == (2, 6), sent
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    counts = (Invocation.objects.count(), AuditEvent.objects.count(), PendingCount.objects.count())
    with pytest.raises(Conflict) as refused:
        services.hold_decide(hold_id=hold.pk, actor=robot, body=body)
    assert refused.value.code == "already_decided"
    assert (Invocation.objects.count(), AuditEvent.objects.count(), PendingCount.objects.count()) == counts
    assert [i.comment for i in hold.items.order_by("position")] == ["no", "no", "no"]


@pytest.mark.django_db(transaction=True)
def test_a_resume_delivery_is_two_round_trips(agent, acap, count_round_trips):
    """The claim (BEGIN, SET LOCAL, the wait for a decision still committing the resume, the UPDATE ...
    RETURNING, COMMIT) is one round trip. Recording a
    "completed" answer is one more: BEGIN, the locks on the invocation and its run, the statement that
    writes the answer, the run's finish, the attempt and both audit events, and COMMIT
    (sql.RECORD_COMPLETED). Pinned so that neither can creep back."""
    resume = _decided_resume(acap)
    with count_round_trips() as sent:
        assert delivery.deliver(resume.id) == "answered"
    assert (sent.round_trips, sent.statements) == (2, 9), sent
    assert agent.requests[-1]["headers"]["webhook-id"] == resume.id
    resume.refresh_from_db()
    assert resume.status == Invocation.Status.ANSWERED
    assert resume.run.status == Run.Status.COMPLETED
    assert DeliveryAttempt.objects.filter(invocation=resume, outcome="answered").count() == 1
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_resume_delivery_costs_a_fixed_number_of_queries(agent, acap, django_assert_num_queries):
    """Inside a test's transaction (savepoints instead of BEGIN and COMMIT)."""
    resume = _decided_resume(acap)
    # PostgreSQL: claim (savepoint, one text with SET LOCAL and the UPDATE ... RETURNING, release);
    # record (one text with the locks and the statement that writes the rest; no savepoint of its own:
    # it only writes when it writes it all).
    with django_assert_num_queries(4):
        assert delivery.deliver(resume.id) == "answered"
    assert agent.requests[-1]["headers"]["webhook-id"] == resume.id


@pytest.mark.django_db(transaction=True)
def test_a_one_round_trip_transaction_that_fails_writes_nothing_and_leaves_the_connection_usable(cap):
    import psycopg
    from django.db import DataError, connection

    from holds.models import PendingCount

    statements = ["INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, 1)", "SELECT 1 / 0"]
    with pytest.raises(DataError):
        one_round_trip(statements, {"cap": cap.pk})
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert PendingCount.objects.filter(delta=1).count() == 0
    assert one_round_trip(statements[:1] + ["SELECT 2"], {"cap": cap.pk}) == [[], [(2,)]]
    assert PendingCount.objects.filter(delta=1).count() == 1
