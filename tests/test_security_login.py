"""Sign-in: lockout after repeated failures (django-axes), a per-address limit, rotation and sign-out."""

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.core.cache import cache
from django.test import Client

from holds import ratelimit
from tests import factories

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-1"


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch):
    """An empty cache, and a clock stopped 10 s into a window: no window turns over mid-test."""
    cache.clear()
    monkeypatch.setattr(ratelimit, "clock", lambda: 1_800_000_010.0)
    yield
    cache.clear()


def sign_in(client, username, password, **extra):
    return client.post("/login/", {"username": username, "password": password}, **extra)


def test_it_signs_in_with_the_right_password(client, member):
    response = sign_in(client, "mona", PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"


def test_it_locks_an_account_out_after_5_failures_even_for_the_right_password(client, member, settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    for _ in range(4):
        assert sign_in(client, "mona", "wrong").status_code == 200
    locked = sign_in(client, "mona", "wrong")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == 15 * 60
    assert "Too many failed sign-ins for this account" in locked.content.decode()
    assert "Content-Security-Policy" in locked  # our page, under our policy
    right = sign_in(client, "mona", PASSWORD)
    assert right.status_code == 429 and "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302


def test_it_locks_only_that_username_from_that_address(client, member, viewer):
    for _ in range(5):
        sign_in(client, "mona", "wrong")
    assert sign_in(client, "vic", PASSWORD).status_code == 302  # another account from the same address
    elsewhere = Client(REMOTE_ADDR="10.9.8.7")
    assert sign_in(elsewhere, "mona", PASSWORD).status_code == 302  # the same account from elsewhere


def test_it_resets_the_failure_count_on_success(client, member):
    for _ in range(4):
        sign_in(client, "mona", "wrong")
    assert sign_in(client, "mona", PASSWORD).status_code == 302
    client.logout()
    for _ in range(4):
        assert sign_in(client, "mona", "wrong").status_code == 200
    assert sign_in(client, "mona", PASSWORD).status_code == 302


def test_it_limits_failed_sign_ins_per_address_across_usernames_with_429(client, db, settings):
    settings.RQ_RATE_LOGIN = "3/m"
    for name in ("a", "b", "c"):
        factories.person(name)
        assert sign_in(client, name, "wrong").status_code == 200
    limited = sign_in(client, "d", "wrong")
    assert limited.status_code == 429 and int(limited["Retry-After"]) == 50  # the rest of the minute
    assert "Too many failed sign-ins. Try again in" in limited.content.decode()
    # A different address still has its budget.
    assert sign_in(Client(REMOTE_ADDR="10.1.2.3"), "a", PASSWORD).status_code == 302


def test_it_does_not_count_successful_sign_ins_against_the_address(client, member, settings):
    settings.RQ_RATE_LOGIN = "2/m"
    for _ in range(5):
        assert sign_in(client, "mona", PASSWORD).status_code == 302
        client.logout()


def test_it_takes_the_address_from_the_proxy_only_behind_one(rf, settings):
    request = rf.post("/login/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.1.1.1, 203.0.113.9")
    settings.RQ_BEHIND_PROXY = False
    assert ratelimit.client_ip(request) == "10.0.0.1"  # a client cannot choose its bucket
    settings.RQ_BEHIND_PROXY = True
    assert ratelimit.client_ip(request) == "203.0.113.9"  # the entry our proxy appended
    request.META["HTTP_X_FORWARDED_FOR"] = "not-an-ip"
    assert ratelimit.client_ip(request) == "10.0.0.1"


def test_it_rotates_the_session_key_on_sign_in(client, member):
    client.get("/login/")
    session = client.session
    session["before"] = "sign-in"
    session.save()
    before = session.session_key
    client.cookies["sessionid"] = before
    assert sign_in(client, "mona", PASSWORD).status_code == 302
    after = client.cookies["sessionid"].value
    assert after != before
    assert not SessionStore().exists(before)  # the pre-sign-in key is gone: no fixation


def test_it_ends_the_session_on_sign_out_so_the_old_cookie_no_longer_works(client, member):
    assert sign_in(client, "mona", PASSWORD).status_code == 302
    old = client.cookies["sessionid"].value
    assert client.get("/").status_code == 200
    assert client.post("/logout/").status_code == 302
    replay = Client()
    replay.cookies["sessionid"] = old
    response = replay.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert not SessionStore().exists(old)


def test_it_refuses_sign_out_by_get(client, member):
    sign_in(client, "mona", PASSWORD)
    assert client.get("/logout/").status_code == 405
    assert client.get("/").status_code == 200


def test_the_admin_sign_in_goes_through_the_same_limited_door(client, db, settings):
    """/admin/login/ checked passwords itself, without RQ_RATE_LOGIN; now it sends people to /login/."""
    root = factories.person("root", role="admin")
    root.is_superuser = True
    root.save()
    settings.RQ_RATE_LOGIN = "3/m"
    door = client.get("/admin/login/?next=/admin/")
    assert door.status_code == 302 and door["Location"] == "/login/?next=/admin/"
    # A password sent to the admin's address is never checked there, right or wrong.
    for password in ("wrong", "wrong", "wrong", "wrong", PASSWORD):
        response = client.post("/admin/login/?next=/admin/", {"username": "root", "password": password})
        assert response.status_code == 302 and response["Location"].startswith("/login/")
        assert "_auth_user_id" not in client.session
    for _ in range(3):
        assert sign_in(client, "root", "wrong").status_code == 200
    assert sign_in(client, "root", PASSWORD).status_code == 429  # the address spent its budget
    fresh = Client(REMOTE_ADDR="10.4.4.4")
    signed_in = sign_in(fresh, "root", PASSWORD, QUERY_STRING="next=/admin/")
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert fresh.get("/admin/").status_code == 200
