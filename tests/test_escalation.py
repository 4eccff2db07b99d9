"""Escalation and delegation (SPEC "Escalation and delegation"): each step once, however many beats run;
the last may expire the hold early; an out-of-office person's messages go to their delegate."""

import datetime as dt

import pytest
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from holds import notifications, notify_tasks, services
from holds.auth import SYSTEM, actor_for_user
from holds.errors import Forbidden, Invalid
from holds.models import AuditEvent, AuditKind, Hold, HoldEscalation, Invocation
from tests import factories

pytestmark = pytest.mark.django_db

STEPS = [{"after": 3600.0, "notify": ["admin", "carol"]}, {"after": 7200.0, "expire": True}]


@pytest.fixture
def team(db):
    people = {
        "ann": factories.person("ann", role="admin"),
        "bob": factories.person("bob", role="admin"),
        "carol": factories.person("carol", role="member"),
        "mona": factories.person("mona", role="member"),
    }
    for name, person in people.items():
        person.email = f"{name}@example.com"
        person.save()
    return people


def later(hours):
    return timezone.now() + dt.timedelta(hours=hours, seconds=1)


def test_each_step_is_taken_once_however_many_beats_run(team):
    cap = factories.capability("pay_big", escalate=STEPS)
    _, hold = factories.held_hold(cap)
    assert notify_tasks.escalate_due(now=timezone.now()) == 0
    mail.outbox.clear()
    assert notify_tasks.escalate_due(now=later(1)) == 1
    assert notify_tasks.escalate_due(now=later(1)) == 0  # a second beat doubles nothing
    assert sorted(m.to[0] for m in mail.outbox) == ["ann@example.com", "bob@example.com", "carol@example.com"]
    assert all(m.subject.startswith("Escalated:") for m in mail.outbox)
    (step,) = HoldEscalation.objects.filter(hold=hold)
    assert step.step == 1 and step.notified == ["ann", "bob", "carol"]
    assert AuditEvent.objects.filter(hold_id_ref=hold.pk, kind=AuditKind.HOLD_ESCALATED).count() == 1


def test_two_workers_taking_one_step_take_it_once(team):
    cap = factories.capability("pay_big", escalate=STEPS)
    _, hold = factories.held_hold(cap)
    first = services.escalation_take(hold_id=hold.pk, step=1, now=later(1))
    second = services.escalation_take(hold_id=hold.pk, step=1, now=later(1))
    assert first is not None and second is None


def test_the_last_step_expires_the_hold_early_with_its_resume(team):
    cap = factories.capability("pay_big", escalate=STEPS)
    _, hold = factories.held_hold(cap)
    assert notify_tasks.escalate_due(now=later(2)) == 2  # both steps were due: each taken once
    hold.refresh_from_db()
    assert hold.status == Hold.Status.EXPIRED
    (resume,) = Invocation.objects.filter(hold=hold, kind="resume")
    assert resume.resume["resolved_by"] == "expired"
    assert list(HoldEscalation.objects.filter(hold=hold, step=2).values_list("notified", flat=True)) == [["expire"]]


def test_a_decided_hold_is_not_escalated(team):
    cap = factories.capability("pay_big", escalate=STEPS)
    _, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(team["ann"]), body=body)
    assert notify_tasks.escalate_due(now=later(2)) == 0


def test_the_hold_page_and_ops_show_escalations(client, team):
    cap = factories.capability("pay_big", escalate=STEPS)
    _, hold = factories.held_hold(cap)
    notify_tasks.escalate_due(now=later(1))
    client.force_login(team["ann"])
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert "data-escalation" in page and "told ann, bob, carol" in page
    ops = client.get("/ops").content.decode()
    assert "data-escalated" in ops and hold.public_id in ops


def test_escalations_and_notifications_go_to_the_delegate_acting_for(team):
    services.person_set_away(
        actor=actor_for_user(team["ann"]),
        person=team["ann"],
        away_from=timezone.now() - dt.timedelta(minutes=1),
        away_until=timezone.now() + dt.timedelta(days=3),
        delegate="bob",
    )
    cap = factories.capability("pay_big", escalate=[{"after": 3600, "notify": ["ann"]}])
    _, hold = factories.held_hold(cap)
    assert "ann@example.com" not in notifications.approver_emails(hold)
    assert "bob@example.com" in notifications.approver_emails(hold)
    mail.outbox.clear()
    notify_tasks.escalate_due(now=later(1))
    (message,) = mail.outbox
    assert message.to == ["bob@example.com"] and "acting for ann" in message.subject
    assert "You are acting for ann" in message.body
    assert HoldEscalation.objects.get(hold=hold).notified == ["bob acting for ann"]


def test_a_delegate_must_already_decide_the_same_capabilities(team):
    factories.capability("pay_big", approvers=["admin"])
    with pytest.raises(Invalid, match="may not decide pay_big; delegation never grants a role") as refused:
        services.person_set_away(
            actor=actor_for_user(team["ann"]),
            person=team["ann"],
            away_from=timezone.now(),
            away_until=later(24),
            delegate="mona",
        )
    assert refused.value.errors[0]["field"] == "delegate"
    with pytest.raises(Forbidden, match="their own out-of-office"):
        services.person_set_away(
            actor=actor_for_user(team["mona"]),
            person=team["ann"],
            away_from=timezone.now(),
            away_until=later(24),
            delegate="bob",
        )
    # An admin (or the system) may set anyone's; before the window starts, messages still go to ann.
    services.person_set_away(actor=SYSTEM, person=team["ann"], away_from=later(2), away_until=later(3), delegate="bob")
    cap = factories.capability("pay_small")
    _, hold = factories.held_hold(cap)
    assert "ann@example.com" in notifications.approver_emails(hold)
    assert "bob@example.com" in notifications.approver_emails(hold)  # bob as himself, an admin


def test_bad_escalate_steps_are_refused_at_load(tmp_path):
    file = tmp_path / "agentos.yaml"
    for steps, message in (
        ("[{after: 2h, notify: [admin]}, {after: 1h, notify: [admin]}]", "later than the step before"),
        ("[{after: 2h, expire: true}, {after: 3h, notify: [admin]}]", "step 1"),
        ("[{after: forever, notify: [admin]}]", "'after' is a duration"),
        ("[]", "a list of steps"),
    ):
        file.write_text(f"capabilities:\n  c:\n    endpoint: http://127.0.0.1:9\n    escalate: {steps}\n")
        with pytest.raises(CommandError, match=message):
            call_command("sync_capabilities", str(file))


def test_set_away_command_sets_and_clears_the_window(team):
    call_command(
        "set_away", "ann", "--from", "2026-01-01T00:00+00:00", "--until", "2099-01-01T00:00+00:00", "--delegate", "bob"
    )
    team["ann"].membership.refresh_from_db()
    assert team["ann"].membership.delegate == team["bob"]
    factories.capability("pay_big", approvers=["admin"])
    with pytest.raises(CommandError, match="delegation never grants a role"):
        call_command(
            "set_away",
            "ann",
            "--from",
            "2026-01-01T00:00+00:00",
            "--until",
            "2099-01-01T00:00+00:00",
            "--delegate",
            "mona",
        )
    call_command("set_away", "ann", "--clear")
    team["ann"].membership.refresh_from_db()
    assert team["ann"].membership.delegate is None and team["ann"].membership.away_from is None
