"""The expiry sweep: due pending holds become expired, each with exactly one resume."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from holds import services, tasks
from holds.models import AuditEvent, Hold, Invocation
from tests import factories

pytestmark = pytest.mark.django_db


def make_due(hold, seconds_ago=1):
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=seconds_ago))


def test_it_expires_due_holds_and_creates_their_resume(cap):
    run, hold = factories.held_hold(cap)
    make_due(hold)
    assert tasks.sweep_expired() == 1
    hold.refresh_from_db()
    assert hold.status == "expired" and hold.decided_by == "expired"
    resume = Invocation.objects.get(hold=hold)
    assert resume.kind == "resume" and resume.seq == 2 and resume.status == "pending"
    assert resume.resume == {"hold_id": hold.public_id, "resolved_by": "expired", "items": [], "comment": None}
    assert AuditEvent.objects.filter(kind="hold.expired", hold_id_ref=hold.pk).count() == 1
    assert tasks.sweep_expired() == 0


def test_it_leaves_holds_that_are_not_due_or_never_expire(cap):
    run, hold = factories.held_hold(cap)
    run2, never = factories.held_hold(cap, factories.ask_body(expires_in=None))
    assert tasks.sweep_expired() == 0
    assert set(Hold.objects.values_list("status", flat=True)) == {"pending"}


def test_it_works_in_batches(cap, settings):
    settings.RQ_SWEEP_BATCH = 2
    holds = [factories.held_hold(cap)[1] for _ in range(5)]
    for hold in holds:
        make_due(hold)
    assert services.holds_expire_due() == 2
    assert tasks.sweep_expired() == 3
    assert Invocation.objects.filter(kind="resume").count() == 5


def test_an_expiry_while_the_asker_is_answering_waits_for_it(cap):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    make_due(hold)
    tasks.sweep_expired()
    assert Invocation.objects.get(hold=hold).status == "waiting"
    factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    assert Invocation.objects.get(hold=hold).status == "pending"


def test_the_command_prints_how_many_it_expired(cap, capsys):
    run, hold = factories.held_hold(cap)
    make_due(hold)
    call_command("sweep_expired")
    assert capsys.readouterr().out.strip() == "expired 1 holds"


def test_a_decided_hold_is_never_expired(cap, member_key, api):
    run, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    api.post(f"/v0/holds/{hold.public_id}/decision", body, key=member_key)
    make_due(hold)
    assert tasks.sweep_expired() == 0
    assert Invocation.objects.filter(hold=hold).count() == 1
