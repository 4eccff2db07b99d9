"""The expiry sweep: due pending holds become expired, each with exactly one resume."""

import datetime as dt
import re
import time

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from holds import services, tasks
from holds.auth import run_token_hash
from holds.models import AuditEvent, Hold, Invocation, PendingCount, milliseconds, new_invocation_id
from holds.services import gateway, ports
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


def test_a_backlog_asks_other_workers_to_help_once(cap, settings, monkeypatch):
    settings.RQ_SWEEP_BATCH, settings.RQ_SWEEPERS = 2, 3
    helpers = []
    monkeypatch.setattr(tasks.sweep_expired, "delay", lambda **kwargs: helpers.append(kwargs))
    for hold in [factories.held_hold(cap)[1] for _ in range(5)]:
        make_due(hold)
    assert tasks.sweep_expired() == 5
    assert helpers == [{"helper": True}] * 2
    # A helper never asks for help, and a first batch that is not full is no backlog.
    for hold in [factories.held_hold(cap)[1] for _ in range(5)]:
        make_due(hold)
    assert tasks.sweep_expired(helper=True) == 5
    make_due(factories.held_hold(cap)[1])
    assert tasks.sweep_expired() == 1
    assert len(helpers) == 2


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


def written_rows(hold):
    """What expiring a hold wrote, without the parts that differ on every write (ids, clocks)."""
    resume = Invocation.objects.get(hold=hold)
    event = AuditEvent.objects.get(kind="hold.expired", hold_id_ref=hold.pk)
    hold.refresh_from_db()
    # The text as stored, not only its value: agents get exactly these bytes.
    resume_text = gateway.fetch("SELECT resume FROM holds_invocation WHERE id = %s", [resume.id])[0][0]
    resume_text = resume_text.replace(hold.public_id, "h_?")
    return (
        (hold.status, hold.decided_by, hold.decided_at is not None),
        {
            field.attname: getattr(resume, field.attname)
            for field in Invocation._meta.concrete_fields
            if field.attname not in ("id", "token_hash", "run_id", "hold_id", "resume", "created_at", "next_attempt_at")
        }
        | {
            "due": resume.next_attempt_at is not None,
            "run_id": resume.run_id - hold.run_id,
            "hold_id": resume.hold_id - hold.pk,
            "resume": resume_text,
        },
        {
            "actor": event.actor,
            "kind": event.kind,
            "run_id_ref": event.run_id_ref - hold.run_id,
            "invocation_id_ref": event.invocation_id_ref == resume.id,
            "data": event.data,
        },
    )


def pending_count(cap) -> int:
    return PendingCount.objects.filter(capability=cap).aggregate(n=Sum("delta"))["n"] or 0


@pytest.mark.parametrize("microseconds", [0, 250_001])
@pytest.mark.parametrize("answering", [False, True])
def test_the_sweep_writes_exactly_the_expired_hold_its_resume_and_its_audit_row(cap, microseconds, answering):
    # Field for field, the resume's stored bytes and the audit's isoformat included (with and without
    # microseconds): what an agent and an auditor read of an expiry.
    expires_at = (timezone.now() - dt.timedelta(minutes=5)).replace(microsecond=microseconds)
    if answering:
        run = factories.start_run(cap)
        invocation, _ = factories.deliver_now(run)
        hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    else:
        run, hold = factories.held_hold(cap)
    asker = Invocation.objects.get(pk=hold.invocation_id)
    Hold.objects.filter(pk=hold.pk).update(expires_at=expires_at)
    pending_before = pending_count(cap)
    (expired,) = services.holds_expire_batch()
    assert pending_count(cap) == pending_before - 1
    resume = Invocation.objects.get(hold=hold)
    assert expired == services.Expired(hold.pk, cap.pk, resume.id, resume.status)
    status = "waiting" if answering else "pending"
    assert written_rows(hold) == (
        ("expired", "expired", True),
        {
            "kind": "resume",
            "seq": asker.seq + 1,
            "status": status,
            "attempts": 0,
            "lease_until": None,
            "first_sent_at": None,
            "answered_at": None,
            "answer": None,
            "last_error": "",
            "due": not answering,
            "run_id": 0,
            "hold_id": 0,
            "resume": '{"hold_id": "h_?", "resolved_by": "expired", "items": [], "comment": null}',
        },
        {
            "actor": "system",
            "kind": "hold.expired",
            "run_id_ref": 0,
            "invocation_id_ref": True,
            "data": {"expires_at": expires_at.isoformat()},
        },
    )


def test_the_sql_sweep_gives_each_resume_a_fresh_id_and_its_run_token_hash(cap):
    holds = [factories.held_hold(cap)[1] for _ in range(3)]
    for hold in holds:
        make_due(hold)
    assert len(services.holds_expire_batch()) == 3
    resumes = list(Invocation.objects.filter(hold__in=holds))
    assert len({r.id for r in resumes}) == 3
    for resume in resumes:
        # As new_invocation_id makes them: the time in milliseconds, then 8 random bytes.
        assert re.fullmatch(r"inv_[0-9a-f]{12}[0-9a-f]{16}", resume.id), resume.id
        assert int(resume.id[4:16], 16) == milliseconds(resume.created_at)
        assert resume.token_hash == run_token_hash(resume.id)


def test_invocation_ids_sort_by_the_time_they_were_made():
    # Indexes keyed by the id then take a batch's new rows on a few pages instead of one page each.
    first = new_invocation_id()
    time.sleep(0.002)
    second = new_invocation_id()
    assert first < second
    assert len(first) == len(second) == len("inv_") + 12 + 16
    assert abs(int(first[4:16], 16) - time.time() * 1000) < 60_000
    assert first[16:] != second[16:]


def test_it_publishes_the_due_resumes_after_commit(cap, django_capture_on_commit_callbacks, monkeypatch):
    published = []
    monkeypatch.setitem(ports._handlers, "publish", published.extend)
    holds = [factories.held_hold(cap)[1] for _ in range(2)]
    for hold in holds:
        make_due(hold)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert services.holds_expire_due() == 2
    assert len(callbacks) == 1
    assert sorted(published) == sorted(Invocation.objects.filter(hold__in=holds).values_list("pk", flat=True))


def test_one_hold_that_cannot_be_expired_never_stops_the_sweep_for_the_others(cap, caplog):
    # A row made to fail: an invocation already holds the seq that the bad hold's resume needs
    # (UNIQUE(run, seq)), so expiring it raises. The batch is then expired hold by hold.
    holds = [factories.held_hold(cap)[1] for _ in range(3)]
    for hold in holds:
        make_due(hold)
    bad = holds[1]
    asker = Invocation.objects.get(pk=bad.invocation_id)
    Invocation.objects.create(run_id=bad.run_id, kind="start", seq=asker.seq + 1, status="answered", token_hash="x")
    with caplog.at_level("ERROR"):
        expired = services.holds_expire_batch()
    assert sorted(e.hold_id for e in expired) == sorted([holds[0].pk, holds[2].pk])
    assert [h.status for h in Hold.objects.filter(pk__in=[h.pk for h in holds]).order_by("pk")] == [
        "expired",
        "pending",
        "expired",
    ]
    assert any(f"h_{bad.pk} could not be expired" in r.getMessage() for r in caplog.records)
    assert Invocation.objects.filter(hold__in=[holds[0], holds[2]]).count() == 2
    assert not Invocation.objects.filter(hold=bad).exists()
