"""The out-of-office page (/away) and the team page's door to it (SPEC "Escalation and delegation"):
a person sets their own window and delegate, an admin anyone's; bad input is a 422 that writes nothing."""

import datetime as dt
import html

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from holds import policy, services
from holds.auth import SYSTEM
from holds.models import AuditEvent, AuditKind, Membership
from tests import factories

pytestmark = pytest.mark.django_db
AWAY_KINDS = (AuditKind.PERSON_AWAY_SET, AuditKind.PERSON_AWAY_CLEARED)


@pytest.fixture
def team(db):
    # pay_big: admins only. ann and bob are admins, carol and mona members, vic a viewer.
    factories.capability("pay_big", approvers=["admin"])
    factories.capability("pay_small")
    roles = {"ann": "admin", "bob": "admin", "carol": "member", "mona": "member", "vic": "viewer"}
    return {name: factories.person(name, role=role) for name, role in roles.items()}


def local(moment: dt.datetime) -> str:
    """What <input type="datetime-local"> sends, in UTC."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")


def window(hours_from=0, hours_until=72, delegate="bob") -> dict:
    now = timezone.now()
    return {
        "away_from": local(now + dt.timedelta(hours=hours_from)),
        "away_until": local(now + dt.timedelta(hours=hours_until)),
        "delegate": delegate,
    }


def away_of(user) -> Membership:
    return Membership.objects.select_related("delegate").get(user=user)


def test_it_sets_and_clears_my_own_out_of_office_from_the_menu(client, team):
    client.force_login(team["ann"])
    queue = client.get("/").content.decode()
    # The person's name in the top bar is their menu: it opens their out-of-office.
    assert '<a class="who" href="/away"' in queue and " · out of office</span></a>" in queue
    assert "role-away" not in queue
    page = client.get("/away")
    assert page.status_code == 200
    text = page.content.decode()
    assert "You are not out of office" in text
    # Only who already decides everything ann decides (pay_big is admins only): bob, not carol nor ann.
    assert '<option value="bob">' in text and 'value="carol"' not in text and 'value="ann"' not in text
    saved = client.post("/away", window(), follow=True)
    assert saved.redirect_chain == [("/away", 303)]
    shown = html.unescape(saved.content.decode())
    assert "You are out of office from" in shown and "bob stands in, acting for you" in shown
    assert 'data-away-state="away"' in shown and '<span class="role role-away">away</span>' in shown
    membership = away_of(team["ann"])
    assert membership.delegate == team["bob"] and membership.away_until > timezone.now() + dt.timedelta(hours=71)
    (event,) = AuditEvent.objects.filter(kind=AuditKind.PERSON_AWAY_SET)
    assert event.actor == "ann" and event.data["username"] == "ann" and event.data["delegate"] == "bob"
    # Routing follows the window: bob is told in ann's stead, and ann again once it has ended.
    people = list(get_user_model().objects.filter(username="ann").select_related("membership__delegate"))
    assert [(t.username, f.username) for t, f in policy.acting_for(people, timezone.now())] == [("bob", "ann")]
    later = timezone.now() + dt.timedelta(days=4)
    assert [(t.username, f) for t, f in policy.acting_for(people, later)] == [("ann", None)]
    cleared = client.post("/away", {"clear": "1"}, follow=True)
    assert "You are no longer out of office" in html.unescape(cleared.content.decode())
    membership = away_of(team["ann"])
    assert membership.delegate is None and membership.away_from is None and membership.away_until is None
    assert AuditEvent.objects.filter(kind=AuditKind.PERSON_AWAY_CLEARED, actor="ann").count() == 1


def test_a_planned_window_shows_as_planned_and_a_member_may_name_another_member(client, team):
    client.force_login(team["carol"])
    assert client.post("/away", window(hours_from=24, delegate="mona")).status_code == 303
    page = client.get("/away").content.decode()
    assert 'data-away-state="planned"' in page and "<strong>mona</strong> stands in" in page
    # An admin may stand in for a member too: admins decide all that members do and more.
    assert client.post("/away", window(delegate="ann")).status_code == 303
    assert away_of(team["carol"]).delegate == team["ann"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"delegate": "nobody"}, "delegate", "nobody has the username 'nobody'"),
        ({"delegate": "carol"}, "delegate", "carol may not decide pay_big; delegation never grants a role"),
        ({"delegate": "vic"}, "delegate", "vic may not decide pay_big, pay_small; delegation never grants a role"),
        ({"delegate": "ann"}, "delegate", "the delegate must be another person, not yourself"),
        ({"delegate": ""}, "delegate", "choose another person who stands in for you"),
        (window(hours_from=5, hours_until=1), "away_until", "the window must end after it starts"),
        (window(hours_from=-72, hours_until=-24), "away_until", "this window has already ended"),
        ({"away_until": ""}, "away_until", "required: when it ends"),
        ({"away_from": "tomorrow"}, "away_from", "a date and time such as 2026-12-24 09:00 (UTC)"),
        ({"away_until": "2026-13-45T99:00"}, "away_until", "a date and time such as"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_nothing_is_written(client, team, change, field, message):
    client.force_login(team["ann"])
    response = client.post("/away", {**window(), **change})
    assert response.status_code == 422
    text = html.unescape(response.content.decode())
    assert "The out-of-office was not saved" in text and message in text
    assert f'id="away-{field.removeprefix("away_")}-error"' in text
    assert not Membership.objects.filter(user=team["ann"], away_from__isnull=False).exists()
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()


def test_a_deactivated_delegate_is_refused(client, team):
    services.person_set_active(user_id=team["bob"].pk, active=False, actor=SYSTEM)
    client.force_login(team["ann"])
    page = client.get("/away").content.decode()
    assert 'value="bob"' not in page and "Nobody can stand in" in page
    response = client.post("/away", window())
    assert response.status_code == 422 and "bob is deactivated" in response.content.decode()
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()


def test_an_admin_sets_someone_elses_from_the_team_page(client, team):
    client.force_login(team["ann"])
    mona = team["mona"]
    team_page = client.get("/team").content.decode()
    assert f'href="/team/people/{mona.pk}/away"' in team_page
    page = client.get(f"/team/people/{mona.pk}/away").content.decode()
    assert "mona is not out of office" in page and '<option value="carol">' in page
    saved = client.post(f"/team/people/{mona.pk}/away", window(delegate="carol"))
    assert saved.status_code == 303 and saved["Location"] == "/team#people"
    assert away_of(mona).delegate == team["carol"]
    assert AuditEvent.objects.get(kind=AuditKind.PERSON_AWAY_SET).actor == "ann"
    assert 'data-away="mona"' in client.get("/team").content.decode()
    # The same checks as on one's own page: no delegate who lacks mona's capabilities.
    refused = client.post(f"/team/people/{mona.pk}/away", window(delegate="vic"))
    assert refused.status_code == 422 and away_of(mona).delegate == team["carol"]
    assert client.post(f"/team/people/{mona.pk}/away", {"clear": "1"}).status_code == 303
    assert away_of(mona).delegate is None


def test_a_member_may_not_set_someone_elses(client, team):
    client.force_login(team["carol"])
    mona = team["mona"]
    assert client.get(f"/team/people/{mona.pk}/away").status_code == 403
    assert client.post(f"/team/people/{mona.pk}/away", window(delegate="carol")).status_code == 403
    assert not AuditEvent.objects.filter(kind__in=AWAY_KINDS).exists()
