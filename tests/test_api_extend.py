"""POST /v0/holds/{id}/extend: more time for a pending hold, by whoever may decide it, with a reason."""

import datetime as dt

import pytest
from django.utils import timezone

from holds import services
from holds.auth import actor_for_account
from holds.models import AuditEvent, Hold, Notification
from tests import factories

pytestmark = pytest.mark.django_db


def extend(api, hold, body, **who):
    return api.post(f"/v0/holds/{hold.public_id}/extend", body, **who)


def test_it_extends_a_pending_hold_and_the_agent_reads_the_new_expiry(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    before = Hold.objects.get(pk=hold.pk).expires_at
    response = extend(api, hold, {"expires_in": 3 * 86400, "reason": "waiting for the bank"}, key=member_key)
    assert response.status_code == 200, response.content
    out = response.json()
    new = dt.datetime.fromisoformat(out["expires_at"])
    assert out["hold_id"] == hold.public_id and out["status"] == "pending"
    assert new > before + dt.timedelta(days=1)
    assert abs((new - timezone.now()) - dt.timedelta(days=3)) < dt.timedelta(seconds=30)
    token = factories.deliver_now(factories.start_run(cap))[1]  # another run's token sees nothing
    assert api.get(f"/v0/holds/{hold.public_id}", token=token).status_code == 404
    read = api.get(f"/v0/holds/{hold.public_id}", key=member_key).json()
    assert read["expires_at"] == out["expires_at"]
    event = AuditEvent.objects.get(kind="hold.extended", hold_id_ref=hold.pk)
    assert event.actor == "service account robot"
    assert event.data["reason"] == "waiting for the bank" and event.data["expires_in"] == 3 * 86400
    assert event.data["expires_at"] == out["expires_at"]


def test_a_run_token_may_read_its_hold_but_not_extend_it(api, cap):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body())
    response = extend(api, hold, {"expires_in": 3 * 86400, "reason": "more"}, token=token)
    assert response.status_code == 403 and response.json()["error"] == "forbidden"


def test_a_viewer_may_not_extend(api, cap):
    run, hold = factories.held_hold(cap)
    _, key = factories.account("watcher", role="viewer")
    response = extend(api, hold, {"expires_in": 3 * 86400, "reason": "more"}, key=key)
    assert response.status_code == 403


def test_without_a_session_or_key_it_is_401_and_an_unknown_hold_404(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    assert extend(api, hold, {"expires_in": 3600, "reason": "x"}).status_code == 401
    assert api.post("/v0/holds/h_999999/extend", {"expires_in": 3600, "reason": "x"}, key=member_key).status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"expires_in": 3 * 86400}, "reason"),
        ({"expires_in": 3 * 86400, "reason": "   "}, "reason"),
        ({"reason": "more"}, "expires_in"),
        ({"expires_in": 59, "reason": "more"}, "expires_in"),
        ({"expires_in": 30 * 86400 + 1, "reason": "more"}, "expires_in"),
        ({"expires_in": True, "reason": "more"}, "expires_in"),
        ({"expires_in": "3600", "reason": "more"}, "expires_in"),
        ({"expires_in": 3 * 86400, "reason": "more", "extra": 1}, "extra"),
    ],
)
def test_a_bad_body_is_422_naming_the_field(api, cap, member_key, body, field):
    run, hold = factories.held_hold(cap)
    response = extend(api, hold, body, key=member_key)
    assert response.status_code == 422, response.content
    assert field in [e["field"] for e in response.json()["errors"]]
    assert not AuditEvent.objects.filter(kind="hold.extended").exists()


def test_a_shorter_expiry_is_422_and_changes_nothing(api, cap, member_key):
    run, hold = factories.held_hold(cap)  # expires in 24 h
    before = Hold.objects.get(pk=hold.pk).expires_at
    response = extend(api, hold, {"expires_in": 3600, "reason": "less"}, key=member_key)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "expires_in"
    assert Hold.objects.get(pk=hold.pk).expires_at == before


def test_a_hold_without_expiry_is_422(api, cap, member_key):
    body = factories.ask_body()
    del body["expires_in"]
    run, hold = factories.held_hold(cap, body)
    response = extend(api, hold, {"expires_in": 3600, "reason": "more"}, key=member_key)
    assert response.status_code == 422
    assert Hold.objects.get(pk=hold.pk).expires_at is None


def test_a_hold_past_its_expiry_is_409_expired_even_before_the_sweep(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = extend(api, hold, {"expires_in": 3600, "reason": "late"}, key=member_key)
    assert response.status_code == 409
    assert response.json()["error"] == "expired" and response.json()["status"] == "expired"
    assert response.json()["expires_at"]


def test_a_decided_hold_is_409_with_its_status(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    approve = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert api.post(f"/v0/holds/{hold.public_id}/decision", approve, key=member_key).status_code == 200
    response = extend(api, hold, {"expires_in": 3600, "reason": "late"}, key=member_key)
    assert response.status_code == 409
    assert response.json()["error"] == "already_decided" and response.json()["status"] == "decided"


def test_the_409_comes_before_the_422(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert extend(api, hold, {"expires_in": 1}, key=member_key).status_code == 409


def test_an_extension_re_arms_the_reminder(cap):
    run, hold = factories.held_hold(cap)
    Notification.objects.create(hold=hold, kind="reminder", channel="email", sent_at=timezone.now())
    Notification.objects.create(hold=hold, kind="asked", channel="email", sent_at=timezone.now())
    actor = actor_for_account(factories.account("bot", role="member")[0])
    services.hold_extend(hold_id=hold.pk, actor=actor, body={"expires_in": 7 * 86400, "reason": "more"})
    assert list(Notification.objects.filter(hold=hold).values_list("kind", flat=True)) == ["asked"]


def test_the_openapi_document_lists_extend(api):
    document = api.get("/v0/openapi.json").json()
    operation = document["paths"]["/v0/holds/{hold_id}/extend"]["post"]
    assert "ExtendIn" in str(operation["requestBody"]) and "409" in operation["responses"]
