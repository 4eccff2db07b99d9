"""The hold page's Extend control: a reason is required, the new expiry shows, refusals say why."""

import datetime as dt

import pytest
from django.utils import timezone

from holds.models import AuditEvent, Hold
from tests import factories

pytestmark = pytest.mark.django_db


def test_a_decider_sees_the_extend_control_with_only_longer_choices(client, cap, member):
    run, hold = factories.held_hold(cap)  # 24 h left
    client.force_login(member)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert 'id="extend"' in page and 'name="reason"' in page and "required" in page
    assert '<option value="259200">3 days from now</option>' in page
    assert '<option value="3600">' not in page and '<option value="86400">' not in page  # not after the current expiry


def test_a_viewer_and_a_hold_without_expiry_show_no_extend_control(client, cap, member, viewer):
    run, hold = factories.held_hold(cap)
    client.force_login(viewer)
    assert 'id="extend"' not in client.get(f"/holds/{hold.public_id}").content.decode()
    body = factories.ask_body()
    del body["expires_in"]
    run, forever = factories.held_hold(cap, body)
    client.force_login(member)
    assert 'id="extend"' not in client.get(f"/holds/{forever.public_id}").content.decode()


def test_extending_from_the_page_moves_the_expiry_and_says_so(client, cap, member):
    run, hold = factories.held_hold(cap)
    client.force_login(member)
    response = client.post(f"/holds/{hold.public_id}/extend", {"expires_in": "604800", "reason": "bank holiday"})
    assert response.status_code == 303 and response["Location"] == f"/holds/{hold.public_id}"
    hold.refresh_from_db()
    assert abs(hold.expires_at - timezone.now() - dt.timedelta(days=7)) < dt.timedelta(seconds=30)
    page = client.get(f"/holds/{hold.public_id}").content.decode()
    assert "Extended: it now expires in 7d" in page
    assert f'datetime="{hold.expires_at.isoformat()}"' in page
    event = AuditEvent.objects.get(kind="hold.extended")
    assert event.actor == "mona" and event.data["reason"] == "bank holiday"


def test_a_blank_reason_or_an_expired_hold_is_refused_with_a_message(client, cap, member):
    run, hold = factories.held_hold(cap)
    client.force_login(member)
    response = client.post(f"/holds/{hold.public_id}/extend", {"expires_in": "604800", "reason": "  "}, follow=True)
    assert "Not extended: a reason is required" in response.content.decode()
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = client.post(f"/holds/{hold.public_id}/extend", {"expires_in": "604800", "reason": "late"}, follow=True)
    assert "Not extended: this hold expired before it was decided" in response.content.decode()
    assert not AuditEvent.objects.filter(kind="hold.extended").exists()


def test_a_viewer_posting_anyway_is_refused(client, cap, viewer):
    run, hold = factories.held_hold(cap)
    client.force_login(viewer)
    response = client.post(f"/holds/{hold.public_id}/extend", {"expires_in": "604800", "reason": "x"}, follow=True)
    assert "Not extended: your role may not decide" in response.content.decode()
    assert not AuditEvent.objects.filter(kind="hold.extended").exists()
