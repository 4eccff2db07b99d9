"""Out of office in Chromium: a person sets their window and delegate from the top bar's link, and the
next escalation meant for them goes to the delegate, "acting for" them (SPEC "Escalation and delegation")."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db.models import Value
from django.db.models.functions import Concat
from django.utils import timezone
from playwright.sync_api import expect

from holds import notify_tasks
from holds.models import HoldEscalation
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def utc_local(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")


def test_a_person_sets_out_of_office_and_escalations_go_to_the_delegate(person_session, session_factory):
    ann = person_session("ann", role="admin", viewport={"width": 1280, "height": 800})
    factories.person("bob", role="admin")
    get_user_model().objects.filter(username__in=["ann", "bob"]).update(email=Concat("username", Value("@example.com")))
    factories.person("carol", role="member")
    cap = factories.capability("pay_big", approvers=["admin"], escalate=[{"after": 3600, "notify": ["ann"]}])

    page = ann.page
    page.get_by_role("link", name="Out of office").click()
    expect(page.get_by_role("heading", name="Out of office", level=1)).to_be_visible()
    expect(page.locator(".away-now")).to_contain_text("You are not out of office")
    # carol may not decide pay_big, so she is not offered; a crafted choice would be a 422.
    expect(page.locator("#away-delegate option")).to_have_text(["Choose a person…", "bob"])

    # A window that ends before it starts is refused in place, nothing saved.
    page.get_by_label("Until").fill(utc_local(timezone.now() - dt.timedelta(days=1)))
    page.get_by_label("Who stands in").select_option("bob")
    page.get_by_role("button", name="Save out of office").click()
    expect(page.locator("#away-until-error")).to_have_text("the window must end after it starts")
    screenshot(page, "away-error-1280")

    page.get_by_label("From").fill(utc_local(timezone.now() - dt.timedelta(minutes=5)))
    page.get_by_label("Until").fill(utc_local(timezone.now() + dt.timedelta(days=3)))
    page.get_by_role("button", name="Save out of office").click()
    expect(page.get_by_text("bob stands in, acting for you")).to_be_visible()
    expect(page.locator(".away-now .status")).to_have_text("away")
    expect(page.locator(".topbar .role-away")).to_have_text("away")
    screenshot(page, "away-1280", full_page=False)

    # The first escalation step names ann; she is away, so bob is told, acting for her.
    _, hold = factories.held_hold(cap)
    mail.outbox.clear()
    assert notify_tasks.escalate_due(now=timezone.now() + dt.timedelta(hours=1, seconds=1)) == 1
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    assert "acting for ann" in mail.outbox[0].subject
    assert HoldEscalation.objects.get(hold=hold).notified == ["bob acting for ann"]
    page.goto(f"/holds/{hold.public_id}")
    expect(page.locator("[data-escalation]")).to_contain_text("told bob acting for ann")

    # On a phone: the same page, the window shown with a way to end it.
    phone = session_factory(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    phone.sign_in("ann")
    phone.page.get_by_role("link", name="Out of office").click()
    expect(phone.page.locator(".away-now")).to_contain_text("bob stands in")
    screenshot(phone.page, "away-390", full_page=False)
    overflow = phone.page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    phone.page.get_by_role("button", name="I'm back: end it now").click()
    expect(phone.page.get_by_text("You are no longer out of office")).to_be_visible()
    assert ann.errors == [] and ann.csp == [] and phone.errors == [] and phone.csp == []
