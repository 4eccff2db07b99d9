"""The Extend control in Chromium: opened by its key, a reason required, the new expiry shown, 0 axe violations."""

import datetime as dt

import pytest
from django.utils import timezone

from holds.models import Hold
from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_extends_a_hold_by_keyboard_and_sees_the_new_expiry(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap, factories.ask_body(expires_in=2 * 3600))
    session = person_session("mona", bypass_csp=True)
    page = session.page
    page.goto(f"/holds/{hold.public_id}")
    assert page.locator("#extend").get_attribute("open") is None
    page.keyboard.press("x")
    page.locator("#extend[open]").wait_for()
    assert page.evaluate("document.activeElement.id") == "extend-expires-in"
    assert violations(page) == [], "extend control open"
    screenshot(page, "hold-extend", full_page=False)
    page.keyboard.press("ArrowDown")  # 4 hours -> 24 hours
    page.keyboard.press("Tab")
    page.keyboard.type("waiting for the bank")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.get_by_text("Extended: it now expires in").wait_for()
    expires_at = Hold.objects.get(pk=hold.pk).expires_at
    assert abs(expires_at - timezone.now() - dt.timedelta(hours=24)) < dt.timedelta(minutes=1)
    assert page.locator(f'time[datetime="{expires_at.isoformat()}"]').count() == 1
    assert violations(page) == [], "after extending"
    screenshot(page, "hold-extended", full_page=False)
    assert session.errors == []


def test_the_reason_is_required_in_the_browser_too(person_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(expires_in=2 * 3600))
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.locator("#extend summary").click()
    before = Hold.objects.get(pk=hold.pk).expires_at
    page.get_by_role("button", name="Extend").click()
    assert page.evaluate("document.getElementById('extend-reason').validity.valueMissing") is True
    assert Hold.objects.get(pk=hold.pk).expires_at == before
