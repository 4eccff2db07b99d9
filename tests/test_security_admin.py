"""The Django admin changes nothing (each change has its audited page) and filters on no secret."""

import pytest
from django.contrib.auth import get_user_model

from holds.models import AuditEvent, Capability, Membership, ServiceAccount
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client, cap):
    root = factories.person("root", role="admin")
    root.is_superuser = True
    root.save()
    client.force_login(root)
    return client


def listing(client, url):
    response = client.get(url)
    return response.status_code, response.content.decode()


def test_it_refuses_lookups_on_secret_fields_so_a_changelist_reads_no_secret_out(superuser_client, cap):
    """`?secret__regex=^whsec_M` listed the capability when the guess was right and nothing when it
    was wrong: one character at a time, the signing secret came out. Every such lookup is now 400,
    right guess or wrong, on the model itself and through a relation."""
    factories.account("robot", role="member")
    assert cap.secret.startswith("whsec_M")
    guesses = [
        "/admin/holds/capability/?secret__regex=^whsec_M",
        "/admin/holds/capability/?secret__regex=^zzz",
        "/admin/holds/capability/?secret__startswith=whsec_",
        "/admin/holds/capability/?secret=" + cap.secret,
        "/admin/holds/run/?capability__secret__regex=^w",
        "/admin/holds/hold/?capability__secret__startswith=w",
        "/admin/holds/serviceaccount/?key_hash__regex=^[0-9a-f]",
        "/admin/holds/invocation/?token_hash__regex=^[0-9a-f]",
        "/admin/holds/invocation/?run__capability__secret__regex=^w",
        "/admin/auth/user/?password__startswith=pbkdf2",
    ]
    for url in guesses:
        status, body = listing(superuser_client, url)
        assert status == 400, url
        assert cap.secret not in body, url
    # Ordinary filters still work.
    assert listing(superuser_client, "/admin/holds/capability/?name=pay_invoices")[0] == 200
    assert listing(superuser_client, "/admin/holds/run/?status__exact=running")[0] == 200


@pytest.mark.parametrize(
    "model, url",
    [
        (Capability, "/admin/holds/capability/"),
        (Membership, "/admin/holds/membership/"),
        (ServiceAccount, "/admin/holds/serviceaccount/"),
        (get_user_model(), "/admin/auth/user/"),
    ],
)
def test_it_shows_capabilities_memberships_accounts_and_people_read_only(superuser_client, model, url):
    """These changed in the admin with no audit event; the team page is where they change, audited."""
    factories.account("robot", role="member")
    obj = model.objects.order_by("pk").first()
    before = (model.objects.count(), AuditEvent.objects.count(), list(model.objects.values().order_by("pk")))
    page = superuser_client.get(f"{url}{obj.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert superuser_client.get(f"{url}add/").status_code == 403
    assert superuser_client.post(f"{url}add/", {"name": "x", "role": "admin", "username": "x"}).status_code == 403
    edits = {"role": "admin", "approvers": '["viewer"]', "is_superuser": "on", "username": "renamed", "name": "x"}
    assert superuser_client.post(f"{url}{obj.pk}/change/", edits).status_code == 403
    assert superuser_client.post(f"{url}{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    after = (model.objects.count(), AuditEvent.objects.count(), list(model.objects.values().order_by("pk")))
    assert after == before


def test_it_never_shows_the_signing_secret_or_key_hashes(superuser_client, cap):
    account, _ = factories.account("robot", role="member")
    capability_page = superuser_client.get(f"/admin/holds/capability/{cap.pk}/change/").content.decode()
    account_page = superuser_client.get(f"/admin/holds/serviceaccount/{account.pk}/change/").content.decode()
    assert cap.secret not in capability_page
    assert account.key_hash not in account_page


def test_the_apps_own_admins_see_every_model_read_only_and_members_do_not(client, cap):
    run, hold = factories.held_hold(cap)
    ada = factories.person("ada", role="admin")  # staff by the team service, with no Django permission
    assert ada.is_staff and not ada.is_superuser and not ada.user_permissions.exists()
    client.force_login(ada)
    index = client.get("/admin/")
    assert index.status_code == 200
    for model in ("holds/hold", "holds/auditevent", "holds/capability", "axes/accessattempt", "auth/user"):
        assert f'href="/admin/{model}/"' in index.content.decode(), model
    assert client.get("/admin/holds/hold/").status_code == 200
    page = client.get(f"/admin/holds/hold/{hold.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(f"/admin/holds/hold/{hold.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get("/admin/holds/capability/?secret__regex=^w").status_code == 400
    client.force_login(factories.person("mona", role="member"))
    assert client.get("/admin/").status_code == 302
    assert client.get("/admin/holds/hold/").status_code == 302


def test_axes_sign_in_records_are_read_only(superuser_client):
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.utils import timezone

    attempt = AccessAttempt.objects.create(
        username="eve", ip_address="10.0.0.1", user_agent="x", failures_since_start=5, attempt_time=timezone.now()
    )
    log = AccessLog.objects.create(username="eve", ip_address="10.0.0.1", user_agent="x", attempt_time=timezone.now())
    failure = AccessFailureLog.objects.create(
        username="eve", ip_address="10.0.0.1", user_agent="x", attempt_time=timezone.now()
    )
    for url, obj in (
        ("/admin/axes/accessattempt/", attempt),
        ("/admin/axes/accesslog/", log),
        ("/admin/axes/accessfailurelog/", failure),
    ):
        listing = superuser_client.get(url).content.decode()
        assert "eve" in listing and 'name="action"' not in listing, url  # no delete, no clean-up
        page = superuser_client.get(f"{url}{obj.pk}/change/").content.decode()
        assert 'name="_save"' not in page and "/delete/" not in page, url
        assert superuser_client.post(f"{url}{obj.pk}/delete/", {"post": "yes"}).status_code == 403, url
        assert superuser_client.post(url, {"action": "delete_selected", "_selected_action": [obj.pk]}).status_code in (
            200,
            302,
        )
        assert type(obj).objects.filter(pk=obj.pk).exists(), url
