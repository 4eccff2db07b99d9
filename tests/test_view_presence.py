"""Presence (cache only) and soft claims (PostgreSQL): who else has a hold open, "I'm on it"."""

import datetime as dt

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from holds import services
from holds.auth import actor_for_user
from holds.models import AuditEvent, Hold
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clear_cache():
    from django.core.cache import cache

    cache.clear()


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]


def test_the_hold_page_says_who_else_is_looking_writing_only_a_first_seen(cap):
    ana, mona = factories.person("ana", role="member"), factories.person("mona", role="member")
    run, hold = factories.held_hold(cap)
    signed_in(ana).get(f"/holds/{hold.public_id}")
    client = signed_in(mona)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/holds/{hold.public_id}").content.decode()
        poll = client.post(f"/holds/{hold.public_id}/presence").content.decode()
    assert "ana is looking" in page and "ana is looking" in poll
    assert "mona is looking" not in page
    # Just looking writes nothing but, once per person, that the hold was seen (its timeline).
    assert [w.split("(")[0].strip() for w in writes(queries.captured_queries)] == ['INSERT INTO "holds_auditevent"']
    assert AuditEvent.objects.get(hold_id_ref=hold.pk, kind="hold.seen").actor == "mona"
    assert 'hx-trigger="every 15s"' in page
    with CaptureQueriesContext(connection) as queries:
        client.get(f"/holds/{hold.public_id}")
        client.post(f"/holds/{hold.public_id}/presence")
    assert writes(queries.captured_queries) == []
    from django.core.cache import cache

    cache.clear()  # a lost cache: the database still knows mona saw it
    client.post(f"/holds/{hold.public_id}/presence")
    assert AuditEvent.objects.filter(hold_id_ref=hold.pk, kind="hold.seen").count() == 1


def test_viewers_see_no_presence_and_are_not_shown_to_others(cap):
    vic = factories.person("vic", role="viewer")
    mona = factories.person("mona", role="member")
    run, hold = factories.held_hold(cap)
    page = signed_in(vic).get(f"/holds/{hold.public_id}").content.decode()
    assert 'id="presence"' not in page
    assert "vic is looking" not in signed_in(mona).get(f"/holds/{hold.public_id}").content.decode()


def test_im_on_it_claims_for_15_minutes_audited_and_the_queue_shows_it(cap):
    ana, mona = factories.person("ana", role="member"), factories.person("mona", role="member")
    run, hold = factories.held_hold(cap)
    response = signed_in(ana).post(f"/holds/{hold.public_id}/claim")
    assert response.status_code == 303
    hold.refresh_from_db()
    assert hold.claimed_by == ana
    assert abs(hold.claimed_until - timezone.now() - dt.timedelta(minutes=15)) < dt.timedelta(seconds=30)
    assert AuditEvent.objects.filter(kind="hold.claimed", hold_id_ref=hold.pk, actor="ana").count() == 1
    client = signed_in(mona)
    assert "Claimed by ana" in client.get(f"/holds/{hold.public_id}").content.decode()
    queue = client.get("/").content.decode()
    assert "claimed by ana" in queue and "ana is looking" not in queue  # ana posted, she did not look
    # Mona may not take it over, but may still decide it: a claim never blocks a decision.
    assert "ana is on it already" in client.post(f"/holds/{hold.public_id}/claim", follow=True).content.decode()
    approve = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(mona), body=approve)
    assert Hold.objects.get(pk=hold.pk).status == "decided"


def test_the_claim_renews_at_most_once_a_minute_unaudited_and_release_is_audited(cap):
    ana = factories.person("ana", role="member")
    run, hold = factories.held_hold(cap)
    client = signed_in(ana)
    client.post(f"/holds/{hold.public_id}/claim")
    first = Hold.objects.get(pk=hold.pk).claimed_until
    client.post(f"/holds/{hold.public_id}/presence")  # the first poll writes, once, that ana saw it
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert "You are on it" in client.post(f"/holds/{hold.public_id}/presence").content.decode()
    assert Hold.objects.get(pk=hold.pk).claimed_until == first  # renewed less than a minute ago
    assert writes(queries.captured_queries) == []
    Hold.objects.filter(pk=hold.pk).update(claimed_until=timezone.now() + dt.timedelta(minutes=13))
    client.post(f"/holds/{hold.public_id}/presence")
    renewed = Hold.objects.get(pk=hold.pk).claimed_until
    assert renewed > timezone.now() + dt.timedelta(minutes=14)
    assert AuditEvent.objects.filter(kind="hold.claimed").count() == 1  # renewals are not audited
    response = client.post(f"/holds/{hold.public_id}/claim", {"release": "1"}, follow=True)
    assert "Released" in response.content.decode()
    assert Hold.objects.get(pk=hold.pk).claimed_by is None
    assert AuditEvent.objects.filter(kind="hold.released", actor="ana").count() == 1


def test_a_claim_runs_out_on_its_own_and_someone_else_may_take_it(cap):
    ana, mona = factories.person("ana", role="member"), factories.person("mona", role="member")
    run, hold = factories.held_hold(cap)
    services.hold_claim(hold_id=hold.pk, actor=actor_for_user(ana))
    Hold.objects.filter(pk=hold.pk).update(claimed_until=timezone.now() - dt.timedelta(seconds=1))
    assert "claimed by" not in signed_in(mona).get("/").content.decode()
    services.hold_claim(hold_id=hold.pk, actor=actor_for_user(mona))
    assert Hold.objects.get(pk=hold.pk).claimed_by == mona


def test_viewers_and_decided_holds_cannot_be_claimed(cap):
    vic, mona = factories.person("vic", role="viewer"), factories.person("mona", role="member")
    run, hold = factories.held_hold(cap)
    assert "Not claimed" in signed_in(vic).post(f"/holds/{hold.public_id}/claim", follow=True).content.decode()
    approve = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(mona), body=approve)
    response = signed_in(mona).post(f"/holds/{hold.public_id}/claim", follow=True).content.decode()
    assert "Not claimed: this hold was already decided" in response
    assert not AuditEvent.objects.filter(kind="hold.claimed").exists()


def test_the_queue_shows_no_claim_or_presence_on_a_hold_its_viewer_may_not_decide():
    # Regression: the queue's presence line asked the role alone (approves), so the starter of a run
    # saw "claimed by …" on its hold under `self_approval: false`, though they may not decide it.
    cap = factories.capability(self_approval=False)
    ana, mona = factories.person("ana", role="member"), factories.person("mona", role="member")
    run = factories.start_run(cap, actor=actor_for_user(mona))
    hold = services.hold_ask(invocation=factories.deliver_now(run)[0], body=factories.ask_body())
    assert signed_in(ana).post(f"/holds/{hold.public_id}/claim").status_code == 303
    assert "claimed by ana" in signed_in(factories.person("olga", role="member")).get("/").content.decode()
    queue = signed_in(mona).get("/?all=1").content.decode()
    assert hold.public_id in queue and "claimed by ana" not in queue


def test_the_poll_says_a_hold_was_decided_meanwhile_and_takes_away_submit_and_extend(cap):
    ana, mona = factories.person("ana", role="member"), factories.person("mona", role="member")
    _, hold = factories.held_hold(cap)
    client = signed_in(mona)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert 'id="decide-buttons"' in page and 'id="extend"' in page
    poll = client.post(f"/holds/{hold.public_id}/presence").content.decode()
    assert "meanwhile" not in poll and "hx-trigger" in poll
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(ana), body=body)
    poll = client.post(f"/holds/{hold.public_id}/presence").content.decode()
    assert "<strong>Decided meanwhile</strong> by ana" in poll and 'role="alert"' in poll
    assert "hx-trigger" not in poll  # the page stops polling
    assert '<div id="decide-buttons" hx-swap-oob="innerHTML">' in poll and "Nothing to submit" in poll
    assert '<div id="extend" hx-swap-oob="delete">' in poll and '<div id="by-confidence" hx-swap-oob="delete">' in poll
    assert '<div id="last-look-body" hx-swap-oob="innerHTML">' in poll and "Confirm decision" not in poll


def test_the_poll_says_a_hold_expired_meanwhile(cap):
    mona = factories.person("mona", role="member")
    _, hold = factories.held_hold(cap)
    client = signed_in(mona)
    client.get(f"/holds/{hold.public_id}")
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    poll = client.post(f"/holds/{hold.public_id}/presence").content.decode()
    assert "<strong>Expired meanwhile</strong>" in poll and "Nothing to submit" in poll
