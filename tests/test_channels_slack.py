"""Slack end to end: a hold's message with buttons through slack_sdk's WebClient to a local stand-in
for Slack's Web API, and button presses signed with the SDK's own signature code, through the
interactions endpoint, the task that decides, and the update in place."""

import json
import time
from urllib.parse import urlencode

import pytest
from celery import current_app
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from holds import notifications, notify_tasks, services, slack
from holds.auth import actor_for_user
from holds.config import ConfigError, load_capabilities
from holds.models import AuditEvent, AuditKind, Hold, Invocation, SlackLink, SlackMessage
from tests import factories
from tests.slack_standin import SlackStandIn

pytestmark = pytest.mark.django_db

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0REVIEWS"
SECRET_DATA = ("SECRET-PAYEE", "98765.43")


@pytest.fixture(autouse=True)
def minute(monkeypatch):
    """Refused requests are counted per minute in the cache: a clear one, and a clock that stands
    still (a test moves it on), so that no count carries over from another test or turns over."""
    from django.core.cache import cache

    from holds import ratelimit

    now = [1_800_000_010.0]
    cache.clear()
    monkeypatch.setattr(ratelimit, "clock", lambda: now[0])
    yield now
    cache.clear()


@pytest.fixture
def standin(settings):
    double = SlackStandIn()
    double.token = "xoxb-test-token"
    settings.RQ_SLACK_BOT_TOKEN = double.token
    settings.RQ_SLACK_SIGNING_SECRET = SECRET
    settings.RQ_SLACK_API_URL = double.url
    yield double
    double.close()


@pytest.fixture
def people(standin):
    found = {}
    for name, role in (("mona", "member"), ("alice", "admin"), ("vic", "viewer")):
        person = factories.person(name, role=role)
        person.email = f"{name}@example.com"
        person.save()
        found[name] = person
        standin.users[f"U{name.upper()}"] = {"email": f"{name.upper()}@example.com", "confirmed": True}
    standin.users["UNOBODY"] = {"email": "nobody@example.com", "confirmed": True}
    standin.users["UUNCONFIRMED"] = {"email": "mona@example.com", "confirmed": False}
    return found


@pytest.fixture
def enqueued(monkeypatch):
    """The interactions endpoint's tasks, captured by name (the test runs each one after the answer)."""
    calls = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args: calls.append((name, args)))
    return calls


def posted_hold(n_items=2, **body):
    cap = factories.capability(notify={"slack": CHANNEL}, approvers=["admin", "member"])
    ask = factories.ask_body(n_items=n_items, **body)
    for item in ask["items"]:
        item["data"] = {"payee": "SECRET-PAYEE", "amount": "98765.43"}
    hold = factories.held_hold(cap, ask)[1]
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="slack") == "posted"
    return hold


def blocks_of(args: dict) -> list[dict]:
    blocks = args["blocks"]
    return json.loads(blocks) if isinstance(blocks, str) else blocks


def signed(body: str, *, secret=SECRET, at=None) -> dict:
    """The headers Slack sends, made with the SDK's own signature code."""
    timestamp = str(int(at if at is not None else time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": signature}


def press_body(hold: Hold, user: str, action=slack.APPROVE) -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": user},
        "channel": {"id": CHANNEL},
        "actions": [{"action_id": action, "block_id": "rq_decide", "value": hold.public_id, "type": "button"}],
    }
    return urlencode({"payload": json.dumps(payload)})


def press(client, hold, user, action=slack.APPROVE, **sign):
    body = press_body(hold, user, action)
    return client.post(
        "/slack/interactions", data=body, content_type="application/x-www-form-urlencoded", **signed(body, **sign)
    )


def run_tasks(enqueued) -> list[str]:
    """Runs what the endpoint enqueued, as a worker would, after the endpoint answered."""
    results = []
    while enqueued:
        name, args = enqueued.pop(0)
        assert name == "holds.notify_tasks.slack_decide"
        results.append(notify_tasks.slack_decide.apply(args=args).get())
    return results


def refusals() -> list[tuple[str, str]]:
    events = AuditEvent.objects.filter(kind=AuditKind.SLACK_REFUSED).order_by("pk")
    return [(e.actor, e.data["reason"]) for e in events]


def test_a_new_hold_posts_its_summary_with_buttons_that_carry_values_not_urls(people, standin):
    hold = posted_hold(intent="Pay <!channel> & 2 invoices")
    [args] = standin.of("chat.postMessage")
    assert args["channel"] == CHANNEL
    blocks = blocks_of(args)
    whole = json.dumps(blocks, ensure_ascii=False)
    assert "Pay &lt;!channel&gt; &amp; 2 invoices" in whole and "<!channel>" not in whole
    assert "`pay_invoices`" in whole and "2 item(s)" in whole and "expires " in whole
    assert "• Payee 1 · 100.00\\n• Payee 2 · 101.00" in whole  # the items' titles
    assert "lowest confidence 0.68" in whole
    for secret in SECRET_DATA:
        assert secret not in whole and secret not in args["text"]
    [actions] = [b for b in blocks if b["type"] == "actions"]
    by_id = {e["action_id"]: e for e in actions["elements"]}
    assert by_id[slack.APPROVE]["value"] == by_id[slack.REJECT]["value"] == hold.public_id
    assert "url" not in by_id[slack.APPROVE] and "url" not in by_id[slack.REJECT]
    assert by_id[slack.OPEN]["url"].endswith(f"/holds/{hold.public_id}") and "value" not in by_id[slack.OPEN]
    message = SlackMessage.objects.get(hold=hold)
    assert (message.channel, message.closed_at) == (CHANNEL, None)
    # Sent once: a retried task finds its notification row sent.
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="slack") == "already-sent"
    assert len(standin.of("chat.postMessage")) == 1


def test_it_flags_hidden_characters_and_mixed_scripts_in_the_message(people, standin):
    posted_hold(intent="Pay Аcme\u200b now")  # a Cyrillic А and a zero-width space
    whole = json.dumps(blocks_of(standin.of("chat.postMessage")[0]), ensure_ascii=False)
    assert "hidden characters" in whole and "mixed scripts" in whole


def test_approve_all_is_acknowledged_first_then_decided_once_as_the_mapped_person(
    client, people, standin, enqueued, django_assert_num_queries
):
    hold = posted_hold()
    calls = len(standin.calls)
    # The answer within Slack's 3 s: no call to Slack, and only the replay guard's queries (savepoint,
    # insert, release, prune).
    with django_assert_num_queries(4):
        response = press(client, hold, "UMONA")
    assert len(standin.calls) == calls
    assert response.status_code == 200
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING  # acknowledged; the decision is the task's
    assert run_tasks(enqueued) == ["decided"]
    hold.refresh_from_db()
    assert (hold.status, hold.decided_by_user_id) == (Hold.Status.DECIDED, people["mona"].pk)
    assert set(hold.items.values_list("action", flat=True)) == {"approve"}
    assert Invocation.objects.filter(hold_id=hold.pk, kind=Invocation.Kind.RESUME).count() == 1
    # Updated in place at once: same channel and ts, the outcome, no buttons.
    message = SlackMessage.objects.get(hold=hold)
    [update] = standin.of("chat.update")
    assert (update["channel"], update["ts"]) == (message.channel, message.ts)
    blocks = blocks_of(update)
    assert not [b for b in blocks if b["type"] == "actions"]
    assert "Decided (approve) by mona" in json.dumps(blocks)
    assert message.closed_at is not None
    assert slack.close_due() == 0  # nothing left for beat


def test_reject_rejects_every_item(client, people, standin, enqueued):
    hold = posted_hold()
    press(client, hold, "UALICE", slack.REJECT)
    assert run_tasks(enqueued) == ["decided"]
    assert set(hold.items.values_list("action", flat=True)) == {"reject"}


def test_a_forged_or_stale_signature_is_refused_and_nothing_is_enqueued(client, people, standin, enqueued):
    hold = posted_hold()
    forged = press(client, hold, "UMONA", secret="not-the-signing-secret")
    stale = press(client, hold, "UMONA", at=time.time() - 301)
    future = press(client, hold, "UMONA", at=time.time() + 301)
    body = press_body(hold, "UMONA")
    unsigned = client.post("/slack/interactions", data=body, content_type="application/x-www-form-urlencoded")
    headers = signed(body)
    tampered = client.post(
        "/slack/interactions",
        data=body.replace("UMONA", "UALICE"),
        content_type="application/x-www-form-urlencoded",
        **headers,
    )
    for response in (forged, stale, future, unsigned, tampered):
        assert response.status_code == 401
        assert "signature" in response.content.decode()
    assert enqueued == []
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING


def test_unsigned_stale_and_forged_requests_are_audited_bounded_by_reason_and_minute(
    client, people, standin, enqueued, minute, monkeypatch
):
    hold = posted_hold()
    body = press_body(hold, "UMONA")

    def send(**headers):
        form = "application/x-www-form-urlencoded"
        return client.post("/slack/interactions", data=body, content_type=form, **headers)

    def counted():
        events = AuditEvent.objects.filter(kind=AuditKind.SLACK_REFUSED).order_by("pk")
        return [(e.actor, e.data["reason"], e.data["count_this_minute"]) for e in events]

    answers = [press(client, hold, "UMONA", secret="not-the-signing-secret") for _ in range(25)]
    answers += [press(client, hold, "UMONA", at=time.time() - 301) for _ in range(3)]
    # A timestamp that is not a number is stale too (the SDK's int() made it a 500).
    for timestamp in ("soon", "1e9", "9" * 5000):
        answers.append(send(HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE="v0=00"))
    answers += [send(), send(HTTP_X_SLACK_SIGNATURE=signed(body)["HTTP_X_SLACK_SIGNATURE"])]
    assert {a.status_code for a in answers} == {401}
    # 33 refusals, 4 events: the 1st and 10th forged, the 1st stale and the 1st unsigned of this minute.
    assert counted() == [
        ("slack:?", "forged signature", 1),
        ("slack:?", "forged signature", 10),
        ("slack:?", "stale timestamp", 1),
        ("slack:?", "unsigned request", 1),
    ]
    for _ in range(90):
        press(client, hold, "UMONA", secret="not-the-signing-secret")
    assert counted()[-1] == ("slack:?", "forged signature", 100)  # and none between 10 and 100
    assert len(counted()) == 5
    minute[0] += 60  # a new minute counts from 1 again
    press(client, hold, "UMONA", secret="not-the-signing-secret")
    assert counted()[-1] == ("slack:?", "forged signature", 1)
    # Without the cache nothing can bound them: they are logged only, and still refused.
    from holds import ratelimit

    monkeypatch.setattr(ratelimit, "_add", lambda *args: 1 / 0)
    minute[0] += 60
    assert press(client, hold, "UMONA", secret="not-the-signing-secret").status_code == 401
    assert len(counted()) == 6
    assert enqueued == []
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING


def test_a_replayed_request_is_refused_and_audited(client, people, standin, enqueued):
    hold = posted_hold()
    body = press_body(hold, "UMONA")
    headers = signed(body)
    first = client.post("/slack/interactions", data=body, content_type="application/x-www-form-urlencoded", **headers)
    again = client.post("/slack/interactions", data=body, content_type="application/x-www-form-urlencoded", **headers)
    assert (first.status_code, again.status_code) == (200, 409)
    assert "received before" in again.content.decode()
    assert len(enqueued) == 1
    assert run_tasks(enqueued) == ["decided"]
    assert refusals() == [("slack:?", "replayed request")]


def test_an_unmapped_or_unconfirmed_slack_user_is_told_alone_and_nothing_is_decided(client, people, standin, enqueued):
    hold = posted_hold()
    press(client, hold, "UNOBODY")
    press(client, hold, "UUNCONFIRMED")  # mona's address, but Slack has not confirmed it
    press(client, hold, "USTRANGER")  # unknown to Slack's users.info... and to us
    assert run_tasks(enqueued) == ["unmapped", "unmapped", "unmapped"]
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING
    told = standin.of("chat.postEphemeral")
    assert [t["user"] for t in told] == ["UNOBODY", "UUNCONFIRMED", "USTRANGER"]
    assert all("not linked to a Review Queue person" in t["text"] for t in told)
    assert refusals() == [(f"slack:{u}", "no person") for u in ("UNOBODY", "UUNCONFIRMED", "USTRANGER")]
    assert not standin.of("chat.update")


def test_a_viewer_is_refused_by_policy_and_audited(client, people, standin, enqueued):
    hold = posted_hold()
    press(client, hold, "UVIC")
    assert run_tasks(enqueued) == ["refused"]
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING
    [told] = standin.of("chat.postEphemeral")
    assert told["user"] == "UVIC" and "may not decide" in told["text"]
    assert refusals() == [("slack:UVIC (vic)", "forbidden")]


def test_an_explicit_link_maps_a_slack_user_without_a_matching_address(client, people, standin, enqueued):
    hold = posted_hold()
    SlackLink.objects.create(user=people["mona"], slack_user_id="UOTHERNAME")
    press(client, hold, "UOTHERNAME")
    assert run_tasks(enqueued) == ["decided"]
    hold.refresh_from_db()
    assert hold.decided_by_user_id == people["mona"].pk
    assert not standin.of("users.info")  # the link answered; Slack was not asked


def test_a_button_of_a_decided_hold_is_refused_with_who_decided_and_nothing_is_decided_twice(
    client, people, standin, enqueued
):
    hold = posted_hold()
    press(client, hold, "UMONA")
    press(client, hold, "UALICE", slack.REJECT)  # pressed before the first was decided
    assert run_tasks(enqueued) == ["decided", "refused"]
    hold.refresh_from_db()
    assert set(hold.items.values_list("action", flat=True)) == {"approve"}
    assert AuditEvent.objects.filter(kind=AuditKind.HOLD_DECIDED, hold_id_ref=hold.pk).count() == 1
    assert Invocation.objects.filter(hold_id=hold.pk, kind=Invocation.Kind.RESUME).count() == 1
    [told] = standin.of("chat.postEphemeral")
    assert told["user"] == "UALICE" and "already decided" in told["text"] and "mona" in told["text"]
    assert refusals() == [("slack:UALICE (alice)", "already_decided")]


def test_a_hold_that_needs_a_choice_per_item_is_sent_to_its_page(client, people, standin, enqueued):
    hold = posted_hold(actions=["edit", "reject"])  # no approve: Approve all cannot decide it
    press(client, hold, "UMONA")
    assert run_tasks(enqueued) == ["refused"]
    [told] = standin.of("chat.postEphemeral")
    assert f"/holds/{hold.public_id}" in told["text"] and "on its page" in told["text"]
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING


def test_a_hold_decided_anywhere_else_or_expired_loses_its_buttons_on_beats_pass(client, people, standin):
    decided = posted_hold()
    services.hold_decide(
        hold_id=decided.pk,
        actor=actor_for_user(people["alice"]),
        body={"items": [{"id": i, "action": "reject"} for i in decided.items.values_list("item_id", flat=True)]},
    )
    cap = decided.capability
    expiring = factories.held_hold(cap, factories.ask_body(expires_in=60))[1]
    notifications.deliver(hold_id=expiring.pk, kind="asked", channel="slack")
    pending = factories.held_hold(cap)[1]
    notifications.deliver(hold_id=pending.pk, kind="asked", channel="slack")
    Hold.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timezone.timedelta(seconds=1))
    services.holds_expire_due()
    assert notify_tasks.close_slack.apply().get() == 2
    updates = {u["ts"]: json.dumps(blocks_of(u)) for u in standin.of("chat.update")}
    by_hold = {m.hold_id: m.ts for m in SlackMessage.objects.all()}
    assert "Decided (reject) by alice" in updates[by_hold[decided.pk]]
    assert "Expired before it was decided" in updates[by_hold[expiring.pk]]
    assert by_hold[pending.pk] not in updates
    assert all('"actions"' not in text for text in updates.values())
    assert notify_tasks.close_slack.apply().get() == 0  # each message is updated once


@pytest.mark.parametrize("ended_by", ["completed", "failed", "admin"])
def test_a_hold_cancelled_with_its_run_loses_its_buttons_in_place(client, people, standin, enqueued, ended_by):
    cap = factories.capability(notify={"slack": CHANNEL}, approvers=["admin", "member"])
    invocation, _ = factories.deliver_now(factories.start_run(cap))
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    assert notifications.deliver(hold_id=hold.pk, kind="asked", channel="slack") == "posted"
    # The agent ends its run instead of suspending on the hold (or an admin fails the run).
    if ended_by == "admin":
        services.run_fail(run_id=hold.run_id, actor=actor_for_user(people["alice"]), reason="stop")
    else:
        factories.answer(invocation, {"status": ended_by, "output": {}, "error": "gave up"})
    hold.refresh_from_db()
    assert hold.status == Hold.Status.CANCELLED
    # A press on the message before it is updated decides nothing and says why, to the presser alone.
    press(client, hold, "UMONA")
    assert run_tasks(enqueued) == ["refused"]
    [told] = standin.of("chat.postEphemeral")
    assert told["user"] == "UMONA" and "cancelled" in told["text"]
    assert not standin.of("chat.update")
    assert notify_tasks.close_slack.apply().get() == 1
    message = SlackMessage.objects.get(hold=hold)
    [update] = standin.of("chat.update")
    assert (update["channel"], update["ts"]) == (message.channel, message.ts)  # in place
    blocks = blocks_of(update)
    assert not [b for b in blocks if b["type"] == "actions"]
    assert "Cancelled: its run finished" in json.dumps(blocks)
    assert message.closed_at is not None
    assert notify_tasks.close_slack.apply().get() == 0  # updated once
    hold.refresh_from_db()
    assert hold.status == Hold.Status.CANCELLED and not hold.items.exclude(action="").exists()


def test_the_endpoint_is_off_without_a_signing_secret(client, settings):
    settings.RQ_SLACK_SIGNING_SECRET = ""
    response = client.post(
        "/slack/interactions", data="payload=%7B%7D", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 404


def test_an_admin_links_a_person_to_a_slack_user_on_the_team_page_and_it_is_audited(client, people, standin):
    client.force_login(people["alice"])
    url = f"/team/people/{people['mona'].pk}/slack"
    assert client.post(url, {"slack_user_id": " u0mona2 "}).status_code == 303
    assert SlackLink.objects.get(user=people["mona"]).slack_user_id == "U0MONA2"
    page = client.get("/team").content.decode()
    assert 'value="U0MONA2"' in page
    event = AuditEvent.objects.filter(kind=AuditKind.PERSON_CHANGED).latest("pk")
    assert event.data == {"username": "mona", "slack_before": "", "slack_after": "U0MONA2"}
    taken = client.post(f"/team/people/{people['vic'].pk}/slack", {"slack_user_id": "U0MONA2"}, follow=True)
    assert "linked to another person" in taken.content.decode()
    bad = client.post(url, {"slack_user_id": "<script>"}, follow=True)
    assert "a Slack member id" in bad.content.decode()
    assert client.post(url, {"slack_user_id": ""}).status_code == 303
    assert not SlackLink.objects.exists()
    client.force_login(people["mona"])  # a member may not link anyone, themselves included
    assert client.post(url, {"slack_user_id": "U0MONA2"}).status_code == 403
    assert not SlackLink.objects.exists()


def test_agentos_yaml_names_a_slack_channel_by_id(tmp_path):
    def load(notify: str):
        path = tmp_path / "agentos.yaml"
        path.write_text(f"capabilities:\n  pay:\n    endpoint: http://127.0.0.1:9/\n    notify: {notify}\n")
        return load_capabilities(path)

    assert load("{slack: C0123456789, push: false}")[0].values["notify"] == {"slack": "C0123456789", "push": False}
    for bad, says in (
        ('{slack: "#general"}', "a Slack channel id"),
        ("{slack: C0123, push: sometimes}", "true or false"),
        ("{teams: x}", "a mapping with"),
    ):
        with pytest.raises(ConfigError) as refused:
            load(bad)
        assert says in str(refused.value.problems), bad


def test_a_quorum_hold_counts_a_slack_approval_and_stays_open_for_the_next(client, people, standin, enqueued):
    hold = posted_hold()
    factories.capability(
        notify={"slack": CHANNEL}, approvers=["admin", "member"], quorum={"approvals": 2, "from": ["admin", "member"]}
    )
    press(client, hold, "UMONA")
    assert run_tasks(enqueued) == ["approved"]
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING
    assert SlackMessage.objects.get(hold=hold).closed_at is None
    press(client, hold, "UALICE")
    assert run_tasks(enqueued) == ["decided"]
    hold.refresh_from_db()
    assert hold.decided_by == "mona, alice"
    assert Invocation.objects.filter(hold_id=hold.pk, kind=Invocation.Kind.RESUME).count() == 1
