"""Pending holds per capability, as the ops page and /metrics read them: counter rows written by
the transactions that change a hold's status, folded by beat, and always equal to a real count."""

import datetime as dt
import threading

import pytest
from django.db import connections
from django.db.models import Count, Sum
from django.utils import timezone

from bench import seeding
from holds import rollup, services
from holds.auth import actor_for_account
from holds.errors import Conflict
from holds.models import Hold, PendingCount
from tests import factories
from tests.test_races import race

pytestmark = pytest.mark.django_db

APPROVE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def counted() -> dict:
    """What the ops page shows: capability id -> pending."""
    return {pk: row["n"] for pk, row in rollup.state()["pending"].items() if row["n"]}


def truth() -> dict:
    rows = Hold.objects.filter(status="pending").values_list("capability_id").annotate(n=Count("id")).order_by()
    return dict(rows)


def test_the_counters_follow_every_way_into_and_out_of_pending(db):
    pay, ship = factories.capability("pay"), factories.capability("ship")
    admin = actor_for_account(factories.account("ops", role="admin")[0])
    holds = [factories.held_hold(pay)[1] for _ in range(3)] + [factories.held_hold(ship)[1] for _ in range(2)]
    assert counted() == truth() == {pay.pk: 3, ship.pk: 2}

    services.hold_decide(hold_id=holds[0].pk, actor=admin, body=APPROVE)  # decided
    services.run_fail(run_id=holds[3].run_id, actor=admin, reason="stop")  # cancelled
    Hold.objects.filter(pk=holds[1].pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert services.holds_expire_due() == 1  # expired
    seeding.seed(holds=40, capability_count=2, items=1, mix=(0.5, 0.25, 0.25))  # seeded, some pending
    assert counted() == truth()
    assert sum(counted().values()) == Hold.objects.filter(status="pending").count()

    assert rollup.fold_pending() > 0
    assert counted() == truth()
    # One row per capability after a fold, and a second fold has nothing to do.
    assert PendingCount.objects.count() == len(truth())
    assert rollup.fold_pending() == 0


def test_a_refused_ask_counts_nothing(db):
    pay = factories.capability("pay")
    run, hold = factories.held_hold(pay)
    run.status = "running"
    run.save()
    with pytest.raises(Conflict):
        services.hold_ask(invocation=hold.invocation, body=factories.ask_body())  # the run has an open hold
    assert counted() == truth() == {pay.pk: 1}


def test_the_oldest_pending_hold_is_read_per_capability(db):
    pay = factories.capability("pay")
    first, second = factories.held_hold(pay)[1], factories.held_hold(pay)[1]
    Hold.objects.filter(pk=first.pk).update(created_at=timezone.now() - dt.timedelta(hours=5))
    assert rollup.state()["pending"][pay.pk]["oldest"] == Hold.objects.get(pk=first.pk).created_at
    admin = actor_for_account(factories.account("ops", role="admin")[0])
    services.hold_decide(hold_id=first.pk, actor=admin, body=APPROVE)
    assert rollup.state()["pending"][pay.pk]["oldest"] == Hold.objects.get(pk=second.pk).created_at


@pytest.mark.django_db(transaction=True)
def test_folds_racing_each_other_and_the_writers_lose_no_delta(db):
    pay = factories.capability("pay")
    stop = threading.Event()

    def writer():
        for n in range(300):
            PendingCount.objects.create(capability_id=pay.pk, delta=1 if n % 3 else -1)
        return 300

    def folder():
        folds = 0
        while not stop.is_set():
            folds += rollup.fold_pending() > 0
        connections.close_all()
        return folds

    folders = [threading.Thread(target=folder) for _ in range(2)]
    for t in folders:
        t.start()
    race(writer, writer)
    stop.set()
    for t in folders:
        t.join()
    # Each writer: 200 times +1 and 100 times -1.
    assert PendingCount.objects.aggregate(total=Sum("delta"))["total"] == 2 * (200 - 100)
