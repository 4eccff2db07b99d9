"""The queue in Chromium: signing in, holds arriving by themselves, and the 4-key path."""

import re

import pytest
from playwright.sync_api import expect

from holds.models import Hold, Invocation
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_signs_in_and_shows_a_newly_asked_hold_without_reloading(person_session, cap):
    session = person_session("mona")
    page = session.page
    expect(page.get_by_role("heading", name="All clear")).to_be_visible()
    page.get_by_label("Search").fill("still typing")  # a half-typed filter must survive the refresh
    page.evaluate("window.__sameDocument = true")

    factories.held_hold(cap, factories.ask_body(intent="Pay the March invoices"))

    expect(page.get_by_role("link", name="Pay the March invoices")).to_be_visible(timeout=15_000)
    expect(page.locator("#queue-rows").get_by_text("1 new")).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
    expect(page.get_by_label("Search")).to_have_value("still typing")
    assert session.csp == [] and session.errors == []


def test_it_keeps_focus_and_filters_while_it_refreshes(person_session, cap):
    other = factories.capability("send_emails")
    factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    session = person_session("mona")
    page = session.page
    page.goto("/?capability=pay_invoices")
    page.keyboard.press("j")
    expect(page.get_by_role("link", name="Pay Acme")).to_be_focused()
    factories.held_hold(other, factories.ask_body(intent="Email the team"))
    factories.held_hold(cap, factories.ask_body(intent="Pay Globex"))
    expect(page.get_by_role("link", name="Pay Globex")).to_be_visible(timeout=15_000)
    expect(page.get_by_role("link", name="Pay Acme")).to_be_focused()
    expect(page.get_by_role("link", name="Email the team")).to_have_count(0)
    screenshot(page, "queue")


def test_it_decides_a_whole_hold_in_four_keystrokes_from_the_queue(person_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=3, intent="Pay 3 invoices"))
    session = person_session("mona")
    page = session.page
    page.goto("/")
    keys = 0

    def press(key):
        nonlocal keys
        keys += 1
        page.keyboard.press(key)

    press("j")
    press("Enter")
    page.wait_for_url(re.compile(rf"/holds/{hold.public_id}$"))
    press("a")
    expect(page.locator("#last-look")).to_be_visible()
    expect(page.locator("#confirm-decision")).to_be_focused()
    press("Control+Enter")
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    assert keys <= 4
    hold.refresh_from_db()
    assert hold.status == Hold.Status.DECIDED and hold.decided_by == "mona"
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert [i["action"] for i in resume["items"]] == ["approve", "approve", "approve"]
    assert session.csp == [] and session.errors == []


def test_it_acts_on_the_focused_item_with_e_r_f_and_c(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    first, second = page.locator("#item-0"), page.locator("#item-1")
    page.keyboard.press("j")
    page.keyboard.press("e")
    expect(first.get_by_label("Edit")).to_be_checked()
    expect(first.get_by_label("payee", exact=True)).to_be_focused()
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("j")
    page.keyboard.press("f")
    expect(second.get_by_label("Feedback")).to_be_checked()
    expect(page.get_by_label("Comment")).to_be_focused()  # feedback needs one
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("k")
    page.keyboard.press("r")
    expect(first.get_by_label("Reject")).to_be_checked()
    page.keyboard.press("c")
    expect(page.get_by_label("Comment")).to_be_focused()
    page.keyboard.type("duplicate of last week")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#last-look")).to_be_visible()
    page.keyboard.press("Control+Enter")
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert [(i["action"], i["comment"]) for i in resume["items"]] == [
        ("reject", "duplicate of last week"),
        ("feedback", "duplicate of last week"),
    ]


def test_it_applies_a_chosen_capability_and_all_pending_without_pressing_apply(person_session, cap):
    from tests.browser.test_browser_a11y import violations

    wires = factories.capability("wire_money", approvers=["admin"])
    factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    factories.held_hold(factories.capability("send_emails"), factories.ask_body(intent="Email Globex"))
    factories.held_hold(wires, factories.ask_body(intent="Wire 1M"))
    session = person_session("mona", bypass_csp=True)  # axe is injected below
    page = session.page
    page.evaluate("window.__sameDocument = true")
    page.get_by_label("Capability").focus()
    page.get_by_label("Capability").select_option("send_emails")
    expect(page.get_by_role("link", name="Pay Acme")).to_have_count(0)
    expect(page.get_by_role("link", name="Email Globex")).to_be_visible()
    expect(page).to_have_url(re.compile(r"capability=send_emails"))
    expect(page.get_by_label("Capability")).to_be_focused()
    page.get_by_label("Capability").select_option("")
    page.get_by_label("All pending").check()
    wire = page.get_by_role("link", name="Wire 1M")
    expect(wire).to_be_visible()
    # The hold this member may not decide says so, in words a screen reader reads with the link.
    expect(wire).to_have_accessible_description("view only")
    expect(page.get_by_role("link", name="Pay Acme")).not_to_have_accessible_description("view only")
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
    assert session.errors == []
    screenshot(page, "queue-all-pending")
    page.reload()  # the pushed URL is the filtered page
    expect(page.get_by_label("All pending")).to_be_checked()
    assert violations(page) == []
