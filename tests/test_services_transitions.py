"""The state machine of SPEC: every allowed transition, and the refusal of every other."""

import pytest
from django.db import IntegrityError, transaction

from holds import services
from holds.auth import SYSTEM, actor_for_user
from holds.errors import Conflict, Forbidden
from holds.models import AuditEvent, Hold, Invocation, PendingCount, Run
from tests import factories

pytestmark = pytest.mark.django_db

APPROVE_BOTH = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def test_run_running_to_held_to_running_to_completed(cap, member):
    run, hold = factories.held_hold(cap)
    assert run.status == "held"
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(member), body=APPROVE_BOTH)
    invocation, _ = factories.deliver_now(run)
    run.refresh_from_db()
    assert run.status == "running" and invocation.kind == "resume"
    factories.answer(invocation, {"status": "completed", "output": {"ok": 1}})
    run.refresh_from_db()
    assert run.status == "completed" and run.finished_at is not None


def test_run_running_to_failed_by_the_agent(cap):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "failed", "error": "no money"})
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "no money")


def test_a_run_asks_again_after_a_resume(cap, member):
    run, hold = factories.held_hold(cap)
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(member), body=APPROVE_BOTH)
    invocation, _ = factories.deliver_now(run)
    second = services.hold_ask(invocation=invocation, body=factories.ask_body())
    factories.answer(invocation, {"status": "suspended", "hold_id": second.public_id})
    run.refresh_from_db()
    assert run.status == "held" and run.seq == 2
    assert list(run.holds.order_by("pk").values_list("status", flat=True)) == ["decided", "pending"]


def test_hold_pending_to_cancelled_when_an_admin_fails_the_run(cap, admin_user):
    run, hold = factories.held_hold(cap)
    services.run_fail(run_id=run.pk, actor=actor_for_user(admin_user), reason="stop")
    hold.refresh_from_db()
    assert hold.status == "cancelled" and hold.decided_at is not None
    run.refresh_from_db()
    assert (run.status, run.error, run.output) == ("failed", "stop", None) and run.finished_at is not None
    event = AuditEvent.objects.get(kind="run.failed")
    assert (event.actor, event.run_id_ref) == (actor_for_user(admin_user).label, run.pk)
    assert event.data == {"error": "stop", "cancelled_holds": [hold.public_id], "cancelled_invocations": []}
    assert sum(PendingCount.objects.filter(capability=cap).values_list("delta", flat=True)) == 0


def test_a_decided_hold_whose_resume_is_unsent_is_cancelled_with_the_run(cap, admin_user, member):
    run, hold = factories.held_hold(cap)
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(member), body=APPROVE_BOTH)
    services.run_fail(run_id=run.pk, actor=actor_for_user(admin_user), reason="stop")
    resume = Invocation.objects.get(hold=hold)
    assert resume.status == "cancelled"
    event = AuditEvent.objects.get(kind="run.failed")
    assert event.data == {"error": "stop", "cancelled_holds": [], "cancelled_invocations": [resume.id]}


@pytest.mark.parametrize("final", ["decided", "expired", "cancelled"])
def test_a_final_hold_cannot_be_decided(cap, member, final):
    run, hold = factories.held_hold(cap)
    Hold.objects.filter(pk=hold.pk).update(status=final)
    with pytest.raises(Conflict) as refused:
        services.hold_decide(hold_id=hold.pk, actor=actor_for_user(member), body=APPROVE_BOTH)
    assert refused.value.code == {"decided": "already_decided", "expired": "expired", "cancelled": "cancelled"}[final]


def test_a_finished_run_cannot_be_failed_again(cap, admin_user):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {}})
    with pytest.raises(Conflict):
        services.run_fail(run_id=run.pk, actor=actor_for_user(admin_user), reason="x")


def test_only_admins_fail_runs(cap, member):
    run = factories.start_run(cap)
    with pytest.raises(Forbidden):
        services.run_fail(run_id=run.pk, actor=actor_for_user(member), reason="x")
    with pytest.raises(Forbidden):
        services.run_fail(run_id=run.pk, actor=SYSTEM, reason="x")


def test_an_answered_invocation_records_nothing_more(cap):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {}})
    again = services.invocation_record(
        invocation_id=invocation.id,
        attempt=invocation.attempts,
        outcome=services.Outcome(kind="answer", answer={"status": "failed", "error": "late"}),
    )
    assert again == "stale"
    assert Run.objects.get(pk=run.pk).status == "completed"


def test_an_invocation_is_claimed_once(cap):
    run = factories.start_run(cap)
    invocation = Invocation.objects.get(run=run)
    assert services.invocation_claim(invocation_id=invocation.id) is not None
    assert services.invocation_claim(invocation_id=invocation.id) is None


def test_the_database_refuses_a_second_pending_hold(cap):
    run, hold = factories.held_hold(cap)
    with pytest.raises(IntegrityError), transaction.atomic():
        Hold.objects.create(
            run=run,
            invocation=hold.invocation,
            capability=cap,
            intent="x",
            actions=["approve"],
            item_count=1,
            fingerprint="0" * 64,
        )


def test_the_database_refuses_a_repeated_seq_and_a_second_resume(cap, member):
    run, hold = factories.held_hold(cap)
    with pytest.raises(IntegrityError), transaction.atomic():
        Invocation.objects.create(run=run, kind="start", seq=1, token_hash="x")
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(member), body=APPROVE_BOTH)
    with pytest.raises(IntegrityError), transaction.atomic():
        Invocation.objects.create(run=run, kind="resume", seq=9, token_hash="y", hold=hold)


def test_the_database_refuses_unknown_statuses(cap):
    run = factories.start_run(cap)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.filter(pk=run.pk).update(status="paused")
