"""Presence, "I'm on it" and approve by confidence in Chromium: keyboard paths, 0 axe violations."""

import pytest

from holds.models import AuditEvent, Hold
from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def confidence_body():
    items = [
        {
            "id": "HIGH",
            "title": "Acme · 120.00",
            "data": {"payee": "Acme", "amount": "120.00"},
            "confidence": {"payee": 0.97, "amount": 0.95},
        },
        {
            "id": "MID",
            "title": "Globex · 80.00",
            "data": {"payee": "Globex", "amount": "80.00"},
            "confidence": {"payee": 0.9, "amount": 0.82},
        },
        {
            "id": "HID",
            "title": "Init\u200bech · 5.00",
            "data": {"payee": "Initech", "amount": "5.00"},
            "confidence": {"amount": 0.99},
        },
    ]
    return factories.ask_body(items=items, intent="Pay 3 invoices")


def test_two_reviewers_see_each_other_and_a_claim(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap)
    ana = person_session("ana", bypass_csp=True)
    mona = person_session("mona", bypass_csp=True)
    ana.page.goto(f"/holds/{hold.public_id}")
    mona.page.goto(f"/holds/{hold.public_id}")
    mona.page.get_by_text("ana is looking", exact=True).wait_for()
    ana.page.keyboard.press("o")  # I'm on it
    ana.page.get_by_text("You are on it", exact=True).wait_for()
    assert Hold.objects.get(pk=hold.pk).claimed_by.username == "ana"
    assert violations(ana.page) == [], "hold page, claimed"
    # Mona's page learns of the claim at its next poll (every 15 s); her queue shows it at once.
    mona.page.get_by_text("Claimed by ana", exact=True).wait_for(timeout=20_000)
    assert mona.page.get_by_text("ana is looking", exact=True).count() == 1
    screenshot(mona.page, "hold-presence", full_page=False)
    assert violations(mona.page) == [], "hold page, someone else's claim"
    mona.page.goto("/")
    mona.page.get_by_text("claimed by ana", exact=True).wait_for()
    assert violations(mona.page) == [], "queue with a claim"
    screenshot(mona.page, "queue-claimed", full_page=False)
    ana.page.keyboard.press("o")  # again: release
    ana.page.get_by_role("button", name="I'm on it").wait_for()
    assert Hold.objects.get(pk=hold.pk).claimed_by is None
    events = list(
        AuditEvent.objects.filter(hold_id_ref=hold.pk, kind__startswith="hold.")
        .values_list("kind", "actor")
        .order_by("id")
    )
    assert [kind for kind, _ in events if kind != "hold.seen"] == ["hold.asked", "hold.claimed", "hold.released"]
    # Both had the page open past its first poll: each was seen once, whenever that poll came.
    assert sorted(actor for kind, actor in events if kind == "hold.seen") == ["ana", "mona"]
    assert ana.errors == [] and mona.errors == []


def test_approve_by_confidence_by_keyboard_sets_the_radios_it_previewed(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap, confidence_body())
    session = person_session("mona", bypass_csp=True)
    page = session.page
    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("b")
    page.get_by_role("heading", name="Stay undecided").wait_for()
    assert page.evaluate("document.activeElement.id") == "bc-threshold"
    preview = page.locator("#bc-preview")
    assert "1 item at or above 0.9 would be approved" in " ".join(preview.inner_text().split())
    assert "hidden characters" in preview.inner_text() and "lowest confidence 0.82 is below 0.9" in preview.inner_text()
    page.keyboard.press("ArrowUp")  # 0.9 -> 0.8: the preview follows the select (server-rendered)
    page.get_by_text("2 items at or above 0.8 would be approved").wait_for()
    assert violations(page) == [], "approve by confidence preview"
    screenshot(page, "hold-by-confidence", full_page=False)
    page.locator("#bc-apply").focus()
    page.keyboard.press("Enter")
    checked = page.evaluate("Array.from(document.querySelectorAll('input[type=radio]:checked')).map(r => r.id)")
    assert sorted(checked) == ["item-0-approve", "item-1-approve"]  # the flagged item stays undecided
    assert session.errors == []


def test_items_set_by_confidence_are_recorded_with_the_decision_and_left_out_of_calibration(person_session, cap):

    from holds import calibration

    _, hold = factories.held_hold(cap, confidence_body())
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("b")
    page.get_by_role("heading", name="Stay undecided").wait_for()
    page.locator("#bc-apply").click()  # HIGH (0.95+) approved by confidence
    page.locator("#item-1-approve").check()  # MID, by hand
    page.locator("#item-2-reject").check()  # HID, the flagged one
    page.get_by_role("button", name="Submit decision").click()
    page.get_by_role("button", name="Confirm decision").click()
    page.get_by_text("Decision recorded").wait_for()
    event = AuditEvent.objects.get(kind="hold.decided", hold_id_ref=hold.pk)
    assert event.data["by_confidence"] == ["HIGH"]
    counted = calibration.tally(None)
    assert counted[cap.pk, "amount", "0.8"][:2] == [1, 0]  # MID, approved by hand
    assert counted[cap.pk, "amount", "0.9"][:2] == [1, 1]  # HID, rejected; HIGH is left out
