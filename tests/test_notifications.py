"""Notifications: email to approvers and a Slack-compatible webhook, as Celery tasks after commit;
the intent, capability and a link, never item data; one reminder; retried and logged on failure."""

import datetime as dt
import logging
import re
import threading

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from holds import delivery, notifications, notify_tasks, services
from holds.auth import actor_for_invocation, actor_for_user
from holds.models import AuditEvent, Capability, Hold, Invocation, Notification
from holds.services import ports
from tests import factories
from tests.agent_double import AgentDouble

pytestmark = pytest.mark.django_db


LEAKY = {
    "intent": "Pay <!channel> & 2 invoices",
    "details": "Internal note: account IBAN DE89-SECRET-DETAILS",
    "items": [
        {
            "id": "INV-1",
            "title": "Payee title TOP-SECRET-TITLE",
            "data": {"payee": "SECRET-PAYEE", "amount": "98765.43"},
        },
        {"id": "INV-2", "title": "Another title", "data": {"payee": "OTHER-SECRET", "amount": "11.11"}},
    ],
}
SECRETS = ("SECRET-PAYEE", "98765.43", "OTHER-SECRET", "TOP-SECRET-TITLE", "SECRET-DETAILS", "IBAN")


@pytest.fixture(autouse=True)
def locmem_mail(settings):
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
    mail.outbox = []


@pytest.fixture
def people(db):
    alice = factories.person("alice", role="admin")
    mona = factories.person("mona", role="member")
    vic = factories.person("vic", role="viewer")
    nomail = factories.person("nomail", role="member")
    for user, address in ((alice, "alice@example.com"), (mona, "mona@example.com"), (vic, "vic@example.com")):
        user.email = address
        user.save()
    return {"alice": alice, "mona": mona, "vic": vic, "nomail": nomail}


@pytest.fixture
def webhook():
    double = AgentDouble()
    double.default = (200, {"ok": True})
    yield double
    double.close()


def leaky_hold(cap, **overrides):
    return factories.held_hold(cap, factories.ask_body(**{**LEAKY, **overrides}))[1]


def test_it_emails_approvers_the_intent_capability_and_link_and_no_item_data(people):
    cap = factories.capability(approvers=["admin", "member"])
    hold = leaky_hold(cap)
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="email") == "sent to 2"
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "mona@example.com"]  # not the viewer
    message = mail.outbox[0]
    assert message.subject == "Review needed: Pay <!channel> & 2 invoices"
    assert "Pay <!channel> & 2 invoices" in message.body
    assert "pay_invoices" in message.body
    assert f"http://127.0.0.1:8000/holds/{hold.public_id}" in message.body
    assert "2 items" in message.body
    whole = message.message().as_string()
    for secret in SECRETS:
        assert secret not in whole, secret


def test_its_email_body_is_plain_text_that_says_when_the_hold_expires(people):
    cap = factories.capability()
    hold = leaky_hold(cap, intent='Pay "Acme" <b>now</b> & later', expires_in=3 * 3600)
    asked = notifications.email_message(hold, "asked", "mona@example.com").body
    reminder = notifications.email_message(hold, "reminder", "mona@example.com").body
    # The template writes text: an intent with quotes and angle brackets is not HTML-escaped.
    assert 'Intent:     Pay "Acme" <b>now</b> & later' in asked and "&quot;" not in asked and "&lt;" not in asked
    assert f"Expires:    {hold.expires_at:%Y-%m-%d %H:%M} UTC" in asked
    assert asked.startswith("An agent is waiting for a decision.")
    assert reminder.startswith("A hold you may decide expires in less than an hour.")
    forever = factories.held_hold(cap, {k: v for k, v in factories.ask_body().items() if k != "expires_in"})[1]
    assert "Expires:    never" in notifications.email_message(forever, "asked", "mona@example.com").body


def test_it_emails_only_admins_when_only_admins_approve(people):
    cap = factories.capability(approvers=["admin"])
    hold = leaky_hold(cap)
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]


def test_it_keeps_line_breaks_of_an_intent_out_of_the_subject(people):
    cap = factories.capability()
    hold = leaky_hold(cap, intent="Pay\r\nBcc: victim@example.com")
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    assert mail.outbox[0].subject == "Review needed: Pay Bcc: victim@example.com"
    assert mail.outbox[0].message()["Bcc"] is None and mail.outbox[0].bcc == []


def test_it_leaves_out_the_person_who_started_the_run_without_self_approval(people):
    cap = factories.capability(self_approval=False)
    run = factories.start_run(cap, actor=actor_for_user(people["mona"]))
    invocation, _ = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]


def test_it_sends_each_notification_once(people):
    cap = factories.capability()
    hold = leaky_hold(cap)
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="email") == "already-sent"
    assert len(mail.outbox) == 2
    row = Notification.objects.get(hold=hold, kind="asked", channel="email")
    assert row.sent_at is not None and row.attempts == 1


def test_it_skips_email_when_the_capability_turns_it_off(people):
    cap = factories.capability(notify={"email": False})
    hold = leaky_hold(cap)
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="email").startswith("skipped")
    assert mail.outbox == []


def test_it_tells_nobody_about_a_hold_that_is_no_longer_pending(people):
    cap = factories.capability()
    hold = leaky_hold(cap)
    services.hold_decide(
        hold_id=hold.pk,
        actor=actor_for_user(people["mona"]),
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]},
    )
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="email") == "not-pending"
    assert mail.outbox == []


def test_it_posts_a_slack_compatible_message_to_the_webhook(people, webhook):
    cap = factories.capability(notify={"webhook": webhook.url + "/hooks/T1"})
    hold = leaky_hold(cap)
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="webhook") == "posted"
    [request] = webhook.requests
    assert request["path"] == "/hooks/T1"
    assert request["headers"]["Content-Type"] == "application/json"
    body = request["body"]
    link = f"http://127.0.0.1:8000/holds/{hold.public_id}"
    # Slack's escaping: "<!channel>" cannot ping anyone, "&" stays text.
    assert (
        body["text"]
        == f"Review needed: Pay &lt;!channel&gt; &amp; 2 invoices (pay_invoices) <{link}|Open {hold.public_id}>"
    )
    assert body["blocks"][0]["type"] == "section" and "`pay_invoices`" in body["blocks"][0]["text"]["text"]
    assert link in body["blocks"][1]["elements"][0]["text"]
    for secret in SECRETS:
        assert secret not in request["raw"].decode(), secret


def test_it_retries_a_failing_webhook_and_logs_each_failure(people, webhook, caplog):
    cap = factories.capability(notify={"webhook": webhook.url})
    hold = leaky_hold(cap)
    webhook.script = [(500, {"error": "down"}), (503, {"error": "down"})]
    with caplog.at_level(logging.WARNING, logger="holds.notify_tasks"):
        # apply() runs the task here; Celery re-runs an eager task's retries at once.
        notify_tasks.notify.apply(args=(hold.pk, "asked", ["webhook"]))
    assert len(webhook.requests) == 3
    failures = [r for r in caplog.records if "failed (try" in r.getMessage()]
    assert len(failures) == 2 and failures[0].hold_id == hold.pk
    row = Notification.objects.get(hold=hold, channel="webhook")
    assert row.sent_at is not None and row.attempts == 3


def test_one_task_sends_both_channels_and_retries_only_the_one_that_failed(people, webhook, caplog):
    cap = factories.capability(approvers=["admin", "member"], notify={"webhook": webhook.url})
    hold = leaky_hold(cap)
    webhook.script = [(500, {"error": "down"})]
    with caplog.at_level(logging.WARNING, logger="holds.notify_tasks"):
        notify_tasks.notify.apply(args=(hold.pk, "asked"))
    # The email went once, on the first try; only the webhook was tried again.
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "mona@example.com"]
    assert len(webhook.requests) == 2
    rows = {row.channel: row for row in Notification.objects.filter(hold=hold)}
    assert rows["email"].attempts == 1 and rows["webhook"].attempts == 2
    assert all(row.sent_at is not None for row in rows.values())
    assert [r.notification for r in caplog.records if "failed (try" in r.getMessage()] == ["asked/webhook"]


def test_it_gives_up_after_the_retry_limit_and_logs_an_error(people, webhook, settings, caplog):
    settings.RQ_NOTIFY_RETRIES = 2
    cap = factories.capability(notify={"webhook": webhook.url})
    hold = leaky_hold(cap)
    webhook.default = (500, {"error": "down"})
    with caplog.at_level(logging.WARNING, logger="holds.notify_tasks"):
        notify_tasks.notify.apply(args=(hold.pk, "asked", ["webhook"]))
    assert len(webhook.requests) == 3
    assert [r.levelname for r in caplog.records if "gave up" in r.getMessage()] == ["ERROR"]
    row = Notification.objects.get(hold=hold, channel="webhook")
    assert row.sent_at is None and "HTTP 500" in row.last_error


def test_it_enqueues_one_task_for_both_channels_after_the_ask_commits(
    people, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: sent.append(args))
    hold = leaky_hold(factories.capability())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ports.hold_asked_on_commit(hold.pk)
    assert sent == [] and len(callbacks) == 1
    callbacks[0]()
    assert sent == [(hold.pk, "asked")]


def test_it_never_blocks_the_ask_when_the_broker_is_down(
    people, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    def down(*args):
        raise ConnectionError("broker down")

    monkeypatch.setattr(notify_tasks.notify, "delay", down)
    hold = leaky_hold(factories.capability())
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        ports.hold_asked_on_commit(hold.pk)  # no exception reaches the ask
    assert [r.hold_id for r in caplog.records if "could not enqueue" in r.getMessage()] == [hold.pk]


@pytest.fixture
def enqueued(monkeypatch):
    """The notification tasks published, by their arguments."""
    calls = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: calls.append(args))
    return calls


def asking():
    """A run whose start invocation a worker is delivering: (the invocation, its run token)."""
    return factories.deliver_now(factories.start_run(factories.capability()))


def test_it_is_enqueued_when_the_run_is_held_on_the_hold_not_by_the_ask(
    people, enqueued, django_capture_on_commit_callbacks
):
    invocation, token = asking()
    with django_capture_on_commit_callbacks(execute=True):
        hold = services.hold_ask_by_token(token=token, body=factories.ask_body())
    assert enqueued == []  # the ask's request publishes nothing
    with django_capture_on_commit_callbacks(execute=True):
        factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    assert enqueued == [(hold.pk, "asked")]


def test_a_hold_decided_before_its_run_is_held_is_not_announced(people, enqueued, django_capture_on_commit_callbacks):
    invocation, _ = asking()
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    services.hold_decide(
        hold_id=hold.pk,
        actor=actor_for_user(people["alice"]),
        body={"items": [{"id": f"INV-{n}", "action": "approve"} for n in (1, 2)]},
    )
    with django_capture_on_commit_callbacks(execute=True):
        factories.answer(invocation, {"status": "suspended", "hold_id": hold.public_id})
    assert Hold.objects.get(pk=hold.pk).status == "decided" and enqueued == []


def test_an_asker_that_dies_still_gets_its_hold_announced(people, enqueued, django_capture_on_commit_callbacks):
    invocation, _ = asking()
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    invocation.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        services.invocation_record(
            invocation_id=invocation.id,
            attempt=invocation.attempts,
            outcome=services.Outcome(kind="retry", error="no answer within 30s", timed_out=True),
        )
    assert enqueued == [(hold.pk, "asked")]


def test_it_catches_up_on_asks_whose_enqueue_was_lost(people, monkeypatch):
    sent = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: sent.append(args))
    hold = leaky_hold(factories.capability())
    assert notify_tasks.remind_due() == 0  # too fresh: the on-commit path has a minute
    assert notify_tasks.remind_due(now=timezone.now() + dt.timedelta(minutes=5)) == 1
    assert sent == [(hold.pk, "asked")]
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="webhook")
    sent.clear()
    assert notify_tasks.remind_due(now=timezone.now() + dt.timedelta(minutes=6)) == 0


def test_it_reminds_once_when_a_long_hold_has_under_an_hour_left(people, monkeypatch):
    sent = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: sent.append(args))
    cap = factories.capability()
    long_hold = leaky_hold(cap, expires_in=3 * 3600)
    short_hold = leaky_hold(cap, expires_in=90 * 60)  # under 2 h of life: no reminder
    Notification.objects.bulk_create(
        Notification(hold=h, kind="asked", channel=c, sent_at=timezone.now())
        for h in (long_hold, short_hold)
        for c in ("email", "webhook")
    )
    now = timezone.now()
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=1)) == 0  # 2 h left
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=2, minutes=15)) == 1
    assert sent == [(long_hold.pk, "reminder")]
    notifications.deliver(hold_id=long_hold.pk, kind="reminder", channel="email")
    assert mail.outbox[0].subject.startswith("Reminder, under an hour left: ")
    for secret in SECRETS:
        assert secret not in mail.outbox[0].body
    notifications.deliver(hold_id=long_hold.pk, kind="reminder", channel="webhook")
    sent.clear()
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=2, minutes=30)) == 0  # once
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=4)) == 0  # expired: nothing


def test_a_get_of_every_link_in_a_sent_message_changes_nothing(client, people):
    """Mail scanners fetch every link of a message, signed in or not: a link opens the hold page, and
    only that page's POST (signed in, with CSRF) decides."""
    cap = factories.capability()
    hold = leaky_hold(cap)
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    notifications.deliver(hold_id=hold.pk, kind="reminder", channel="email")
    links = {link for m in mail.outbox for link in re.findall(r"https?://\S+", m.message().as_string())}
    assert links == {f"http://127.0.0.1:8000/holds/{hold.public_id}"}
    before = (AuditEvent.objects.count(), Invocation.objects.count(), Notification.objects.count())
    for signed_in in (False, True):
        if signed_in:
            client.force_login(people["mona"])
        for link in links:
            path = link.removeprefix("http://127.0.0.1:8000")
            for method in (client.get, client.head, client.options):
                assert method(path).status_code in (200, 302, 405)
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING and hold.decided_at is None
    assert set(hold.items.values_list("action", flat=True)) == {""}
    assert (AuditEvent.objects.count(), Invocation.objects.count(), Notification.objects.count()) == before
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    form = re.search(r'<form[^>]*id="decision-form"[^>]*>', page).group(0)
    assert 'method="post"' in form and "csrfmiddlewaretoken" in page


def test_remind_before_reminds_once_when_the_time_left_falls_below_it_and_again_after_an_extension(people, monkeypatch):
    sent = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: sent.append(args))
    cap = factories.capability(remind_before=dt.timedelta(hours=6))
    other = factories.capability(name="refunds")  # no remind_before: the default rule (under an hour)
    hold = leaky_hold(cap, expires_in=24 * 3600)
    short = leaky_hold(cap, expires_in=3 * 3600)  # asked with less time left than 6 h: never above it
    default = leaky_hold(other, expires_in=24 * 3600)
    Notification.objects.bulk_create(
        Notification(hold=h, kind="asked", channel=c, sent_at=timezone.now())
        for h in (hold, short, default)
        for c in ("email", "webhook")
    )
    now = timezone.now()
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=17)) == 0  # 7 h left
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=18, minutes=5)) == 1
    assert sent == [(hold.pk, "reminder")]
    notifications.deliver(hold_id=hold.pk, kind="reminder", channel="email")
    assert mail.outbox[0].subject.startswith("Reminder, under 6 hours left: ")
    assert "expires in less than 6 hours." in mail.outbox[0].body
    for secret in SECRETS:
        assert secret not in mail.outbox[0].body
    notifications.deliver(hold_id=hold.pk, kind="reminder", channel="webhook")
    sent.clear()
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=19)) == 0  # once
    # An extension re-arms it: reminded again when the new deadline is under 6 h away.
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() + dt.timedelta(hours=4))
    services.hold_extend(
        hold_id=hold.pk, actor=actor_for_user(people["mona"]), body={"expires_in": 2 * 86400, "reason": "bank"}
    )
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=20)) == 0
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=43)) == 1
    assert sent == [(hold.pk, "reminder")]
    sent.clear()
    assert notify_tasks.remind_due(now=now + dt.timedelta(hours=23, minutes=30)) == 1  # the default rule
    assert sent == [(default.pk, "reminder")]


def test_it_leaves_out_who_started_a_run_two_levels_up_without_self_approval(people):
    # Regression: only the direct starter was left out, so the grandparent run's starter was
    # e-mailed about a hold they may not decide (policy.deciders_of is the queue's rule).
    cap = factories.capability(self_approval=False)
    grandparent = factories.start_run(cap, actor=actor_for_user(people["mona"]))
    parent = factories.start_run(cap, actor=actor_for_invocation(factories.deliver_now(grandparent)[0]))
    child = factories.start_run(cap, actor=actor_for_invocation(factories.deliver_now(parent)[0]))
    hold = services.hold_ask(invocation=factories.deliver_now(child)[0], body=factories.ask_body())
    notifications.deliver(hold_id=hold.pk, kind="asked", channel="email")
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]


# --- a capability's failing endpoint, for admins ----------------------------------------------------


@pytest.fixture
def run_endpoint_tasks(monkeypatch):
    """The endpoint alert's task, run here when delivery's commit enqueues it (as a worker would)."""
    enqueued = []

    def delay(*args):
        enqueued.append(args)
        notify_tasks.notify_endpoint.apply(args=args)

    monkeypatch.setattr(notify_tasks.notify_endpoint, "delay", delay)
    return enqueued


def failing_delivery(agent, acap, settings):
    settings.RQ_ENDPOINT_FAILING_AFTER = 3
    settings.RQ_RETRY_SCHEDULE = [0] * 10  # room for failures past the threshold
    agent.default = (502, b"down")
    return Invocation.objects.get(run=factories.start_run(acap))


def attempt(invocation, callbacks_capture):
    Invocation.objects.filter(pk=invocation.pk).update(next_attempt_at=timezone.now())
    with callbacks_capture(execute=True):
        return delivery.deliver(invocation.pk)


def test_a_failing_endpoint_emails_every_admin_once_and_once_more_when_it_answers(
    people, agent, acap, settings, run_endpoint_tasks, django_capture_on_commit_callbacks
):
    root = factories.person("root", role="member")
    root.is_superuser, root.email = True, "root@example.com"
    root.save()
    gone = factories.person("gone", role="admin")
    gone.is_active, gone.email = False, "gone@example.com"
    gone.save()
    invocation = failing_delivery(agent, acap, settings)
    for _ in range(2):
        assert attempt(invocation, django_capture_on_commit_callbacks) == "retry"
    assert mail.outbox == []
    assert attempt(invocation, django_capture_on_commit_callbacks) == "retry"
    # Admins (a membership or a superuser) who are active; not members, viewers or the deactivated.
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "root@example.com"]
    assert {m.subject for m in mail.outbox} == {"Endpoint failing: pay_invoices"}
    assert "3 deliveries in a row" in mail.outbox[0].body
    for _ in range(3):
        attempt(invocation, django_capture_on_commit_callbacks)
    assert len(mail.outbox) == 2  # still failing: nothing more
    agent.default = (200, {"status": "completed", "output": {}})
    assert attempt(invocation, django_capture_on_commit_callbacks) == "answered"
    assert [m.subject for m in mail.outbox[2:]] == ["Endpoint answering again: pay_invoices"] * 2
    rows = Notification.objects.filter(capability=acap, channel="email").values_list("kind", "sent_at")
    assert sorted(kind for kind, sent_at in rows if sent_at) == ["answering", "failing"]


def test_an_endpoint_that_answers_before_anyone_was_told_sends_nothing(
    people, agent, acap, settings, run_endpoint_tasks, django_capture_on_commit_callbacks
):
    invocation = failing_delivery(agent, acap, settings)
    attempt(invocation, django_capture_on_commit_callbacks)
    agent.default = (200, {"status": "completed", "output": {}})
    assert attempt(invocation, django_capture_on_commit_callbacks) == "answered"
    assert mail.outbox == [] and run_endpoint_tasks == []


@pytest.mark.django_db(transaction=True)
def test_two_workers_sending_the_same_alert_send_one_mail(people, acap, settings):
    since = timezone.now() - dt.timedelta(minutes=1)
    Capability.objects.filter(pk=acap.pk).update(endpoint_failures=3, endpoint_failing_since=since)
    barrier = threading.Barrier(2)
    results = []

    def worker():
        barrier.wait()
        try:
            results.append(
                notifications.deliver_endpoint(capability_id=acap.pk, kind="failing", spell=since, channel="email")
            )
        except notifications.Busy:
            results.append("busy")
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.com"]
    assert sorted(results)[0] in ("already-sent", "busy") and "sent to 1" in results


def test_the_alert_posts_to_the_capabilitys_webhook(people, acap, settings, webhook):
    since = timezone.now()
    Capability.objects.filter(pk=acap.pk).update(
        endpoint_failures=3, endpoint_failing_since=since, notify={"webhook": webhook.url}
    )
    notify_tasks.notify_endpoint.apply(args=(acap.pk, "failing", since.isoformat()))
    assert len(webhook.requests) == 1 and "Endpoint failing: pay_invoices" in webhook.requests[0]["body"]["text"]
