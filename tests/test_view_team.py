"""/team: admins manage people, service accounts and capability approvers; everything is audited."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client

from holds import services
from holds.auth import SYSTEM, sha256_hex
from holds.config import CapabilitySpec
from holds.models import AuditEvent, Capability, ServiceAccount
from tests import factories

pytestmark = pytest.mark.django_db


User = get_user_model()


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def secret_on(response) -> str:
    match = re.search(r'id="secret" class="secret" value="([^"]+)"', response.content.decode())
    assert match, "the secret is not shown"
    return match.group(1).replace("&amp;", "&")


def test_it_is_for_admins_only(client, member, viewer):
    assert client.get("/team").status_code == 302
    for person in (member, viewer):
        client.force_login(person)
        assert client.get("/team").status_code == 403
        assert client.post("/team/people", {"username": "eve", "role": "admin"}).status_code == 403
        assert client.post("/team/accounts", {"name": "bot", "role": "admin"}).status_code == 403
    assert not User.objects.filter(username="eve").exists()
    assert not ServiceAccount.objects.filter(name="bot").exists()


def test_it_lists_people_accounts_and_capabilities_with_marks_for_file_values(admin_client, member):
    factories.capability("from_file", approvers=["admin"])
    factories.capability("by_default")
    factories.account("robot", role="viewer")
    response = admin_client.get("/team")
    assert response.status_code == 200
    page = response.content.decode()
    assert "alice" in page and "mona" in page and "robot" in page
    caps = {c["capability"].name: c for c in response.context["capabilities"]}
    assert caps["from_file"]["from_file"] == {"approvers"}
    assert caps["by_default"]["from_file"] == set()
    assert page.count('title="Set by agentos.yaml"') == 1


def test_it_shows_each_capabilitys_protocol(admin_client, member):
    factories.capability("over_agui", endpoint="http://127.0.0.1:9/agent", protocol="ag-ui")
    factories.capability("over_a2a", protocol="a2a")
    factories.capability("plain")
    page = admin_client.get("/team").content.decode()
    assert "v1 · AG-UI · http://127.0.0.1:9/agent" in page
    assert "v1 · A2A · http://127.0.0.1:9" in page
    assert "v1 · agentos invoke · http://127.0.0.1:9" in page


def test_it_adds_a_person_with_a_one_time_password_shown_once(admin_client, client):
    response = admin_client.post(
        "/team/people", {"username": "nina", "email": "nina@example.com", "role": "member", "password": "once"}
    )
    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    password = secret_on(response)
    assert len(password) >= 16
    nina = User.objects.get(username="nina")
    assert nina.membership.role == "member" and nina.email == "nina@example.com"
    assert nina.check_password(password)
    assert password not in admin_client.get("/team").content.decode()
    event = AuditEvent.objects.get(kind="person.added", data__username="nina")
    assert event.actor == "alice" and event.data["role"] == "member"


def test_it_adds_a_person_with_a_set_password_link_that_works_once(admin_client, client):
    response = admin_client.post("/team/people", {"username": "omar", "role": "viewer", "password": "link"})
    assert response.status_code == 201
    link = secret_on(response)
    assert link.startswith("http://127.0.0.1:8000/team/set-password/")
    omar = User.objects.get(username="omar")
    assert not omar.has_usable_password() or not omar.check_password("")
    client.logout()
    path = link.removeprefix("http://127.0.0.1:8000")
    form_page = client.get(path, follow=True)
    assert form_page.status_code == 200 and "Set your password" in form_page.content.decode()
    done = client.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": "a-long-pass-phrase-9", "new_password2": "a-long-pass-phrase-9"},
        follow=True,
    )
    assert "Password set" in done.content.decode()
    omar.refresh_from_db()
    assert omar.check_password("a-long-pass-phrase-9")
    again = client.get(path, follow=True)
    assert "This link no longer works" in again.content.decode()


def test_it_refuses_a_taken_username_and_a_bad_email(admin_client, member):
    response = admin_client.post("/team/people", {"username": "MONA", "role": "member", "password": "once"})
    assert response.status_code == 422
    assert "Someone already has this username." in response.content.decode()
    response = admin_client.post(
        "/team/people", {"username": "x", "email": "not-an-email", "role": "member", "password": "once"}
    )
    assert response.status_code == 422 and not User.objects.filter(username="x").exists()


def test_it_changes_a_role_and_audits_from_what_to_what(admin_client, member):
    response = admin_client.post(f"/team/people/{member.pk}/role", {"role": "viewer"})
    assert response.status_code == 303 and response["Location"] == "/team"
    member.refresh_from_db()
    assert member.membership.role == "viewer"
    event = AuditEvent.objects.get(kind="person.role_changed")
    assert (event.actor, event.data) == ("alice", {"username": "mona", "before": "member", "after": "viewer"})


def test_it_refuses_an_unknown_role(admin_client, member):
    response = admin_client.post(f"/team/people/{member.pk}/role", {"role": "owner"}, follow=True)
    assert "one of admin, member, viewer" in response.content.decode()
    member.refresh_from_db()
    assert member.membership.role == "member"


def test_it_deactivates_a_person_who_is_signed_out_at_once(admin_client, member):
    mona = Client()
    mona.force_login(member)
    assert mona.get("/").status_code == 200
    response = admin_client.post(f"/team/people/{member.pk}/active", {"active": "0"})
    assert response.status_code == 303
    member.refresh_from_db()
    assert member.is_active is False
    assert mona.get("/").status_code == 302  # back to sign-in
    assert AuditEvent.objects.filter(kind="person.deactivated", actor="alice").exists()
    admin_client.post(f"/team/people/{member.pk}/active", {"active": "1"})
    member.refresh_from_db()
    assert member.is_active is True


def test_it_will_not_let_an_admin_deactivate_themselves(admin_client, admin_user):
    response = admin_client.post(f"/team/people/{admin_user.pk}/active", {"active": "0"}, follow=True)
    assert "you cannot deactivate yourself" in response.content.decode()
    admin_user.refresh_from_db()
    assert admin_user.is_active


def test_it_creates_a_service_account_whose_key_is_shown_once_and_only_hashed(admin_client, api):
    response = admin_client.post("/team/accounts", {"name": "deploy-bot", "role": "member"})
    assert response.status_code == 201 and "no-store" in response["Cache-Control"]
    key = secret_on(response)
    account = ServiceAccount.objects.get(name="deploy-bot")
    assert account.key_hash == sha256_hex(key) and key not in str(account.__dict__)
    assert key not in admin_client.get("/team").content.decode()
    assert api.get("/v0/holds", key=key).status_code == 200
    event = AuditEvent.objects.get(kind="service_account.created")
    assert event.actor == "alice" and key not in str(event.data)


def test_it_revokes_a_key_with_effect_at_once(admin_client, api):
    account, key = factories.account("robot", role="member")
    assert api.get("/v0/holds", key=key).status_code == 200
    assert admin_client.post(f"/team/accounts/{account.pk}/revoke").status_code == 303
    assert api.get("/v0/holds", key=key).status_code == 401
    assert AuditEvent.objects.filter(kind="service_account.revoked", actor="alice").exists()
    again = admin_client.post(f"/team/accounts/{account.pk}/revoke", follow=True)
    assert "already revoked" in again.content.decode()


def test_it_changes_a_service_accounts_role(admin_client):
    account, _ = factories.account("robot", role="member")
    admin_client.post(f"/team/accounts/{account.pk}/role", {"role": "admin"})
    account.refresh_from_db()
    assert account.role == "admin"
    event = AuditEvent.objects.get(kind="service_account.role_changed")
    assert event.data == {"name": "robot", "before": "member", "after": "admin"}


def test_it_sets_approvers_and_self_approval_until_a_sync_overwrites_file_values(admin_client):
    cap = factories.capability("pay_invoices", approvers=["admin", "member"])
    # Ticked: admin only; self_approval unticked (the form says it was shown).
    response = admin_client.post(f"/team/capabilities/{cap.pk}", {"approvers": ["admin"], "self_approval_shown": "1"})
    assert response.status_code == 303
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["Approvers of pay_invoices saved."]
    cap.refresh_from_db()
    assert cap.approvers == ["admin"] and cap.self_approval is False
    event = AuditEvent.objects.get(kind="capability.approvers_changed")
    assert event.actor == "alice"
    assert event.data["before"] == {"approvers": ["admin", "member"], "self_approval": True}
    assert event.data["after"] == {"approvers": ["admin"], "self_approval": False}
    # The file sets approvers: a sync puts the file's value back over the admin's change.
    spec = CapabilitySpec(
        name="pay_invoices",
        values={"endpoint": cap.endpoint, "secret": factories.SECRET, "approvers": ["admin", "member"]},
    )
    services.capabilities_sync(specs=[spec], actor=SYSTEM)
    cap.refresh_from_db()
    assert cap.approvers == ["admin", "member"] and "approvers" in cap.from_file


def test_it_refuses_an_empty_or_unknown_approver_list(admin_client):
    cap = factories.capability()
    response = admin_client.post(f"/team/capabilities/{cap.pk}", {"self_approval_shown": "1"}, follow=True)
    assert "a non-empty list of roles" in response.content.decode()
    admin_client.post(f"/team/capabilities/{cap.pk}", {"approvers": ["viewer"], "self_approval_shown": "1"})
    cap.refresh_from_db()
    assert cap.approvers == ["admin", "member"]
    assert not AuditEvent.objects.filter(kind="capability.approvers_changed").exists()


def test_it_refuses_team_posts_from_members(client, member):
    cap = factories.capability()
    client.force_login(member)
    assert client.post(f"/team/capabilities/{cap.pk}", {"approvers": ["member"]}).status_code == 403
    assert client.post(f"/team/people/{member.pk}/role", {"role": "admin"}).status_code == 403
    member.refresh_from_db()
    assert member.membership.role == "member"
    assert Capability.objects.get(pk=cap.pk).approvers == ["admin", "member"]


def test_it_asks_once_more_before_changing_your_own_role(admin_client, admin_user):
    factories.person("bea", role="admin")  # not the last admin: only the confirmation stands in the way
    response = admin_client.post(f"/team/people/{admin_user.pk}/role", {"role": "member"})
    assert response.status_code == 200
    assert "Change your own role to member?" in response.content.decode()
    admin_user.membership.refresh_from_db()
    assert admin_user.membership.role == "admin"

    response = admin_client.post(f"/team/people/{admin_user.pk}/role", {"role": "member", "confirm": "1"})
    assert response.status_code == 303
    admin_user.membership.refresh_from_db()
    assert admin_user.membership.role == "member"


def test_it_refuses_to_remove_the_last_admin(admin_client, admin_user, member):
    response = admin_client.post(f"/team/people/{admin_user.pk}/role", {"role": "viewer", "confirm": "1"}, follow=True)
    assert "this is the last admin" in response.content.decode()
    admin_user.membership.refresh_from_db()
    assert admin_user.membership.role == "admin"
    assert not AuditEvent.objects.filter(kind="person.role_changed").exists()


def test_it_refuses_to_deactivate_the_last_other_admin_of_a_service_account(admin_user):
    account, _ = factories.account("root-bot", role="admin")
    from holds.auth import actor_for_account
    from holds.errors import Conflict

    with pytest.raises(Conflict) as refused:
        services.person_set_active(user_id=admin_user.pk, active=False, actor=actor_for_account(account))
    assert refused.value.code == "last_admin"
    admin_user.refresh_from_db()
    assert admin_user.is_active


def test_a_superuser_counts_as_an_admin(admin_client, admin_user):
    User.objects.create_superuser("root", password="pw-for-tests-1")
    admin_client.post(f"/team/people/{admin_user.pk}/role", {"role": "member", "confirm": "1"})
    admin_user.membership.refresh_from_db()
    assert admin_user.membership.role == "member"
