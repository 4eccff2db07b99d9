"""/v0/me/away: a signed-in person's own out-of-office through the API, with the page's checks (the same
service); who "me" is comes from the session, never from the body."""

import datetime as dt
import json

import pytest
from django.test import Client
from django.utils import timezone

from holds.models import AuditEvent, AuditKind, Membership
from tests import factories

pytestmark = pytest.mark.django_db
URL = "/v0/me/away"
AWAY_KINDS = (AuditKind.PERSON_AWAY_SET, AuditKind.PERSON_AWAY_CLEARED)
NOTHING = {"away_from": None, "away_until": None, "delegate": None, "away_now": False}


@pytest.fixture
def team(db):
    factories.capability("pay_big", approvers=["admin"])
    roles = {"ann": "admin", "bob": "admin", "carol": "member"}
    return {name: factories.person(name, role=role) for name, role in roles.items()}


def body(hours_from=0, hours_until=72, delegate="bob") -> dict:
    now = timezone.now()
    return {
        "away_from": (now + dt.timedelta(hours=hours_from)).isoformat(),
        "away_until": (now + dt.timedelta(hours=hours_until)).isoformat(),
        "delegate": delegate,
    }


def test_a_person_sets_reads_and_clears_their_own(client, api, team):
    client.force_login(team["ann"])
    assert api.get(URL).json() == {"username": "ann", **NOTHING}
    sent = body()
    response = api.put(URL, sent)
    assert response.status_code == 200, response.content
    out = response.json()
    assert out["username"] == "ann" and out["delegate"] == "bob" and out["away_now"] is True
    assert dt.datetime.fromisoformat(out["away_until"]) == dt.datetime.fromisoformat(sent["away_until"])
    assert api.get(URL).json() == out
    assert AuditEvent.objects.get(kind=AuditKind.PERSON_AWAY_SET).actor == "ann"
    planned = api.put(URL, body(hours_from=24)).json()
    assert planned["away_now"] is False and planned["delegate"] == "bob"
    cleared = api.delete(URL)
    assert cleared.status_code == 200 and cleared.json() == {"username": "ann", **NOTHING}
    assert AuditEvent.objects.filter(kind=AuditKind.PERSON_AWAY_CLEARED).count() == 1


@pytest.mark.parametrize(
    ("sent", "field", "message"),
    [
        (body(delegate="nobody"), "delegate", "nobody has the username"),
        (body(delegate="carol"), "delegate", "carol may not decide pay_big; delegation never grants a role"),
        (body(delegate="ann"), "delegate", "not yourself"),
        (body(hours_from=5, hours_until=1), "away_until", "the window must end after it starts"),
        (body(hours_from=-72, hours_until=-24), "away_until", "this window has already ended"),
        ({**body(), "away_from": "2026-12-24T09:00"}, "away_from", "with its offset"),
        ({**body(), "away_until": "soon"}, "away_until", "with its offset"),
        ({**body(), "delegate": ""}, "delegate", "at least 1 character"),
        ({"away_from": body()["away_from"], "delegate": "bob"}, "away_until", "Field required"),
        ({**body(), "username": "bob"}, "username", "Extra inputs are not permitted"),
        ({**body(), "delegate": 7}, "delegate", "Input should be a valid string"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_nothing_is_written(client, api, team, sent, field, message):
    client.force_login(team["ann"])
    response = api.put(URL, sent)
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert field in [e["field"] for e in errors]
    assert any(message in e["message"] for e in errors if e["field"] == field)
    assert not Membership.objects.filter(away_from__isnull=False).exists()
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()


@pytest.mark.parametrize("raw", ["[", "[]", "null", '"x"'])
def test_bad_bodies_are_4xx_never_500(client, api, team, raw):
    client.force_login(team["ann"])
    assert api.put(URL, None, raw=raw).status_code in (400, 422)
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()


def test_only_a_signed_in_person_has_one(api, team, admin_key):
    # A key names a service account, not a person: an admin's key is refused too (the team page sets others').
    assert api.get(URL, key=admin_key).status_code == 403
    assert api.put(URL, body(), key=admin_key).status_code == 403
    assert api.delete(URL, key=admin_key).status_code == 403
    assert api.get(URL).status_code == 401
    assert api.put(URL, body()).status_code == 401
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()


def test_a_session_write_needs_its_csrf_token(team):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(team["ann"])
    refused = browser.put(URL, json.dumps(body()), content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["message"]
    browser.get("/away")  # sets the csrftoken cookie
    token = browser.cookies["csrftoken"].value
    accepted = browser.put(URL, json.dumps(body()), content_type="application/json", headers={"X-CSRFToken": token})
    assert accepted.status_code == 200, accepted.content


def test_answers_match_the_openapi_document(client, api, team):
    import jsonschema

    doc = client.get("/v0/openapi.json").json()

    def check(method, response):
        content = doc["paths"][URL][method]["responses"][str(response.status_code)]["content"]
        jsonschema.validate(response.json(), {"components": doc["components"], **content["application/json"]["schema"]})

    client.force_login(team["ann"])
    check("get", api.get(URL))
    check("put", api.put(URL, body()))
    check("put", api.put(URL, body(delegate="carol")))  # 422
    check("delete", api.delete(URL))
