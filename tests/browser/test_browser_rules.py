"""Approve and remember in Chromium: a grant from a decided hold (key g), its backtest, and the next
matching hold decided by it; the rules page. 0 axe violations; screenshots at 1280x800 and 390x844."""

import pytest
from django.contrib.auth import get_user_model

from holds import services
from holds.auth import actor_for_user
from holds.models import Grant, Hold
from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def invoice_hold(cap, payee, amount):
    item = {"id": "INV-1", "title": f"{payee} · {amount}", "data": {"payee": payee, "amount": amount}}
    return factories.held_hold(cap, factories.ask_body(1, items=[item]))[1]


def decide(hold, username, action):
    actor = actor_for_user(get_user_model().objects.get(username=username))
    services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": [{"id": "INV-1", "action": action}]})


def test_a_grant_from_a_hold_is_backtested_and_decides_the_next_matching_hold(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    session = person_session("mona", bypass_csp=True)
    page = session.page
    # The past: Acme 99.00 approved once and rejected once by a person.
    decide(invoice_hold(cap, "Acme", "99.00"), "mona", "reject")
    hold = invoice_hold(cap, "Acme", "99.00")
    decide(hold, "mona", "approve")

    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("g")
    page.wait_for_url(f"**/holds/{hold.public_id}/grant?item=INV-1")
    when = page.get_by_label("When")
    assert when.input_value() == 'item.data.payee == "Acme" && item.data.amount == "99.00"'
    page.get_by_role("button", name="Preview: backtest").click()
    page.locator("#backtest").wait_for()
    assert page.locator("[data-backtest-decided]").inner_text() == "2"
    assert page.locator("[data-backtest-differ]").inner_text() == "1"
    assert page.locator("#backtest a[href^='/holds/']").count() == 1
    assert violations(page) == [], "grant form with its backtest"
    for name, size in SIZES.items():
        page.set_viewport_size(size)
        # Nothing of the form or its backtest pushes the page sideways (tables scroll in their box).
        assert page.evaluate("document.querySelector('main').scrollWidth <= innerWidth"), name
        screenshot(page, f"grant-backtest-{name}")
    page.set_viewport_size(SIZES["wide"])
    page.get_by_label("At most this many uses").fill("5")
    page.get_by_role("button", name="Backtest and save the grant").click()
    page.wait_for_url(f"**/capabilities/{cap.name}/rules#grants")
    page.get_by_text("would have approved 2 item(s); people decided 1 of those otherwise").wait_for()
    grant = Grant.objects.get()
    row = page.locator(f'tr[data-grant="{grant.public_id}"]')
    assert "0 / 5" in row.inner_text() and "never" in row.inner_text()
    assert violations(page) == [], "rules page with the grant"
    for name, size in SIZES.items():
        page.set_viewport_size(size)
        screenshot(page, f"rules-page-{name}")
    page.set_viewport_size(SIZES["wide"])

    # The next matching hold is decided by the grant, and says so.
    following = invoice_hold(cap, "Acme", "99.00")
    assert Hold.objects.get(pk=following.pk).status == "decided"
    page.goto(f"/holds/{following.public_id}")
    assert f"Decided by grant {grant.public_id}" in page.locator(".outcome").inner_text()
    assert f"decided by grant {grant.public_id}" in page.locator("fieldset.item").inner_text()
    screenshot(page, "hold-decided-by-grant", full_page=False)
    page.goto(f"/capabilities/{cap.name}/rules")
    assert "1 / 5" in page.locator(f'tr[data-grant="{grant.public_id}"]').inner_text()
    # A different payee still goes to people.
    assert Hold.objects.get(pk=invoice_hold(cap, "Other", "99.00").pk).status == "pending"
    assert session.errors == [] and session.csp == []


def test_an_admin_edits_rules_sees_a_refusal_with_where_and_saves(person_session, cap):
    session = person_session("alice", role="admin")
    page = session.page
    decide(invoice_hold(cap, "Acme", "12.00"), "alice", "approve")
    page.goto(f"/capabilities/{cap.name}/rules")
    editor = page.get_by_role("textbox", name="Rules")
    editor.fill("- id: small\n  when: double(item.data.amount) <\n  then: approve\n")
    page.get_by_role("button", name="Backtest and save as a new version").click()
    assert "rule 1: when: Syntax error" in page.locator(".error-box").inner_text()
    page.get_by_role("textbox", name="Rules").fill(
        "- id: small\n  when: double(item.data.amount) < 100.0\n  then: approve\n"
    )
    page.get_by_role("button", name="Backtest", exact=True).click()
    assert page.locator("[data-backtest-decided]").inner_text() == "1"
    page.get_by_role("button", name="Backtest and save as a new version").click()
    page.get_by_text("Rules v1 saved.").wait_for()
    assert "double(item.data.amount) < 100.0" in page.locator(".rules-table").inner_text()
    assert Hold.objects.get(pk=invoice_hold(cap, "Acme", "13.00").pk).decided_by == "rule small v1"
    assert session.errors == []
