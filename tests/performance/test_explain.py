"""The sweep, relay, token and ops queries use their indexes, not a sequential scan, once there is enough data for the
planner to care (PostgreSQL, 20,000 seeded holds). The queue and history queries are pinned the
same way in test_view_queue.py."""

import pytest
from django.db import connection, transaction
from django.utils import timezone

from bench import seeding
from holds import rollup, services
from holds.models import Invocation
from holds.services import asks, delivery, gateway, sql

pytestmark = [pytest.mark.django_db]


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker):
    """20,000 holds seeded once for the module's plans (2.3 s; it was done for each test), in a transaction
    rolled back after the module: each test's own transaction is a savepoint inside it, so what one test
    writes is gone before the next."""
    with django_db_blocker.unblock(), transaction.atomic():
        seeding.seed(holds=20_000, capability_count=3, items=1)
        gateway.fetch("ANALYZE")
        # The seed's deferred foreign-key checks, run here once: each test's teardown checks constraints
        # inside its savepoint, and rolling that back would leave them to run again after every test.
        connection.check_constraints()
        yield
        transaction.set_rollback(True)


def plan(queryset) -> str:
    return queryset.explain()


def test_the_sweep_reads_due_holds_through_its_partial_index(seeded):
    text = plan(services.due_holds()[:1000])
    # Either partial index of pending holds will do (hold_sweep_due or one_pending_hold_per_run):
    # both hold only pending rows, so the sweep never reads the decided history.
    assert "hold_sweep_due" in text or "one_pending_hold_per_run" in text, text
    assert "Seq Scan on holds_hold" not in text, text


def test_the_relay_reads_due_invocations_through_the_outbox_index(seeded):
    text = plan(services.due_invocations()[:500])
    assert "invocation_outbox_due" in text and "Seq Scan on holds_invocation" not in text, text


def test_a_token_finds_its_invocation_by_primary_key(seeded):
    invocation = Invocation.objects.order_by("pk").first()
    text = "\n".join(row[0] for row in gateway.fetch("EXPLAIN " + sql.TOKEN.parts()[0], [invocation.id]))
    assert "Index Scan using holds_invocation_" in text and "Seq Scan on holds_invocation" not in text, text


def test_an_ask_finds_its_token_by_primary_key_in_its_own_statement(seeded):
    from tests import factories

    invocation = Invocation.objects.order_by("pk").first()
    ask, items, _ = asks.read_ask(factories.ask_body(), None)
    hold, event, rows = asks.new_hold(ask, items, invocation_id=invocation.id)
    statement, params = asks.ask_statement(hold, items, rows, event, run=None, token_hash=invocation.token_hash)
    text = "\n".join(row[0] for row in gateway.fetch("EXPLAIN " + statement, params))
    # Not the partial index of live invocations, searched for the id (it grows with the backlog).
    assert "Index Scan using holds_invocation_pkey" in text and "invocation_outbox_due" not in text, text


def test_the_ops_page_finds_each_oldest_pending_hold_by_index(seeded):
    text = plan(rollup.capabilities_with_oldest())
    assert "hold_pending_age" in text and "Seq Scan on holds_hold" not in text, text


def test_the_ops_page_counts_holds_expiring_within_the_hour_by_index(seeded):
    text = plan(rollup.expiring_soon(timezone.now())[:10_000])
    assert "hold_sweep_due" in text and "one_pending_hold_per_run" not in text, text
    assert "Seq Scan on holds_hold" not in text, text


def test_invocation_ids_have_no_pattern_index_that_nothing_reads():
    # Each would cost the sweep and every decision an index write on a random page (migration 0008).
    found = gateway.fetch(
        "SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%varchar_pattern_ops%' "
        "AND tablename IN ('holds_invocation', 'holds_hold')"
    )
    assert found == []


def test_a_claim_moves_its_held_run_on_by_primary_key_however_many_runs_are_held(cap):
    from holds.auth import actor_for_account
    from tests import factories

    run, hold = factories.held_hold(cap)
    # 401 held runs, not yet analyzed (as after a burst of asks): a scan of them looked cheap to the
    # planner when the claim joined them to the one claimed row.
    seeding.copy_run(run.pk, 400)
    services.hold_decide(
        hold_id=hold.pk,
        actor=actor_for_account(factories.account("bot", role="member")[0]),
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]},
    )
    resume = Invocation.objects.get(hold=hold)
    params = {"id": resume.id, "now": timezone.now(), "grace": 5.0}
    text = "\n".join(row[0] for row in gateway.fetch("EXPLAIN " + delivery.CLAIM_SQL, params))
    assert "Seq Scan on holds_run" not in text and "Seq Scan on holds_invocation" not in text, text
