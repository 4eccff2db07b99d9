"""holds/services/gateway.py: statements PREPAREd once per connection, sent several to a round trip."""

import datetime as dt

import psycopg
import pytest
from django.db import DataError, connection, transaction
from django.utils import timezone

from holds.models import Capability, PendingCount
from holds.services import gateway

pytestmark = [pytest.mark.django_db(transaction=True)]


def _prepared_here() -> set[str]:
    return {name for (name,) in gateway.fetch("SELECT name FROM pg_prepared_statements WHERE name LIKE 'rq\\_%%'")}


def test_a_statement_is_prepared_once_per_connection_and_then_only_executed():
    statement = "SELECT %(n)s + 1, %(label)s || '!', %(when)s, %(ids)s, %(nothing)s::int"
    when = timezone.now()
    before = _prepared_here()
    first = gateway.send([(statement, {"n": 1, "label": "a", "when": when, "ids": ["x", "y"], "nothing": None})])
    made = _prepared_here() - before
    again = gateway.send([(statement, {"n": 41, "label": "b", "when": when, "ids": ["z"], "nothing": None})])
    assert first == [[(2, "a!", when, ["x", "y"], None)]]
    assert again == [[(42, "b!", when, ["z"], None)]]
    assert len(made) == 1
    assert _prepared_here() - before == made


def test_statements_run_in_order_in_one_text_and_each_returns_its_rows(cap):
    rows = gateway.send(
        [
            ("BEGIN", None),
            ("INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%s, %s)", [cap.pk, 7]),
            ("SELECT sum(delta) FROM holds_pendingcount WHERE capability_id = %s AND delta = 7", [cap.pk]),
            ("COMMIT", None),
        ]
    )
    assert rows == [[], [], [(7,)], []]
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_percent_sign_is_escaped_where_there_are_parameters_and_plain_where_there_are_none():
    assert gateway.send([("SELECT '100%%' || %(x)s", {"x": "!"}), ("SELECT '5%'", None)]) == [
        [("100%!",)],
        [("5%",)],
    ]


def test_a_failed_round_trip_forgets_what_it_prepared_and_the_statement_works_next_time(cap):
    insert = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    with pytest.raises(DataError):
        gateway.send([("BEGIN", None), (insert, {"cap": cap.pk, "delta": 3}), ("SELECT 1 / 0", None)])
    connection.connection.execute("ROLLBACK")
    assert PendingCount.objects.filter(delta=3).count() == 0
    gateway.send([(insert, {"cap": cap.pk, "delta": 3})])
    assert PendingCount.objects.filter(delta=3).count() == 1


def test_kept_writes_travel_with_the_commit_and_other_queries_see_them_first(cap, count_round_trips):
    insert = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    with count_round_trips() as sent:
        with gateway.transaction():
            gateway.write((insert, {"cap": cap.pk, "delta": 5}))
            # An ORM query in the block first sends what was kept: it sees the row.
            assert PendingCount.objects.filter(delta=5).count() == 1
            gateway.write((insert, {"cap": cap.pk, "delta": 6}), (insert, {"cap": cap.pk, "delta": 6}))
    # BEGIN with the first write, the count, then both writes with the COMMIT: psycopg sent no BEGIN of
    # its own, and Django's commit had nothing left to send.
    assert (sent.round_trips, sent.statements) == (3, 6), sent
    assert PendingCount.objects.filter(delta__in=(5, 6)).count() == 3


def test_kept_writes_are_not_sent_when_the_block_raises(cap):
    insert = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    with pytest.raises(RuntimeError), gateway.transaction():
        PendingCount.objects.create(capability_id=cap.pk, delta=8)
        gateway.write((insert, {"cap": cap.pk, "delta": 9}))
        raise RuntimeError("the caller changed its mind")
    assert PendingCount.objects.filter(delta__in=(8, 9)).count() == 0
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_transaction_whose_text_fails_rolls_back_and_runs_no_on_commit_hook(cap):
    insert = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    hooks = []
    with pytest.raises(DataError), gateway.transaction():
        transaction.on_commit(lambda: hooks.append("ran"))
        gateway.write((insert, {"cap": cap.pk, "delta": 7}), ("SELECT 1 / 0", None))
    assert hooks == [] and PendingCount.objects.filter(delta=7).count() == 0
    with gateway.transaction():  # the connection is usable, and the next hook waits for its commit
        transaction.on_commit(lambda: hooks.append("ran"))
        gateway.write((insert, {"cap": cap.pk, "delta": 7}))
        assert hooks == []
    assert hooks == ["ran"] and PendingCount.objects.filter(delta=7).count() == 1


def test_a_transaction_inside_an_outer_one_leaves_the_commit_to_it(cap):
    insert = "INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%(cap)s, %(delta)s)"
    with pytest.raises(RuntimeError), transaction.atomic():
        with gateway.transaction():
            gateway.write((insert, {"cap": cap.pk, "delta": 4}))
        assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        raise RuntimeError("the outer block rolls back")
    assert PendingCount.objects.filter(delta=4).count() == 0


def test_a_write_outside_a_transaction_is_sent_at_once(cap):
    gateway.write(("INSERT INTO holds_pendingcount (capability_id, delta) VALUES (%s, %s)", [cap.pk, 2]))
    assert PendingCount.objects.filter(delta=2).count() == 1


def test_types_that_postgresql_must_infer_still_reach_their_columns(cap):
    # None and JSON (as the field prepares it) go as "unknown" and take the column's type.
    schema = Capability._meta.get_field("output_schema")
    gateway.send(
        [
            (
                "UPDATE holds_capability SET endpoint_stalled_at = %(when)s, output_schema = %(schema)s"
                " WHERE id = %(id)s",
                {"when": None, "schema": schema.get_db_prep_save({"type": "object"}, connection), "id": cap.pk},
            )
        ]
    )
    cap.refresh_from_db()
    assert cap.endpoint_stalled_at is None and cap.output_schema == {"type": "object"}
    later = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    gateway.send(
        [
            (
                "UPDATE holds_capability SET endpoint_stalled_at = %(when)s WHERE id = %(id)s",
                {"when": later, "id": cap.pk},
            )
        ]
    )
    cap.refresh_from_db()
    assert cap.endpoint_stalled_at == later
