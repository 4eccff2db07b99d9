"""Hostile agent text in Chromium: shown literally, never run; and the UI under CSP makes 0 violations."""

import pytest
from playwright.sync_api import expect

from holds.models import Invocation
from tests import factories

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<img src=x onerror=alert(1)>"
HTMX = '<a hx-get="/logout/" hx-trigger="load" hx-on:click="alert(2)">hx</a>'


def hostile_body():
    return factories.ask_body(
        intent=f"Pay {XSS}",
        items=[
            {
                "id": "INV-1",
                "title": f"Title {XSS}",
                "data": {XSS: f"value {XSS}", "payee": HTMX, "amount": "1.00"},
                "confidence": {XSS: 0.3},
            }
        ],
        details=f"Details {XSS}\n\n{HTMX}\n\n[click](javascript:alert(3)) ![pic](http://evil.example/p.png) "
        "<script>alert(4)</script>",
    )


def no_agent_markup(page):
    """No element in the page came from agent text: no <img>, no <script> body, no live hx-* attribute."""
    assert page.locator("main img").count() == 0
    assert page.locator("[hx-trigger=load], [hx-on\\:click], [onerror]").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.evaluate("[...document.scripts].filter(s => s.textContent.includes('alert')).length") == 0


def test_it_shows_hostile_text_literally_in_every_field_and_runs_none_of_it(person_session, cap):
    _, hold = factories.held_hold(cap, hostile_body())
    session = person_session("mona")
    page = session.page
    page.goto("/")
    expect(page.get_by_role("link", name=f"Pay {XSS}")).to_be_visible()
    page.wait_for_timeout(5_500)  # one HTMX refresh of the rows: the fragment is as inert as the page
    expect(page.get_by_role("link", name=f"Pay {XSS}")).to_be_visible()
    no_agent_markup(page)

    page.goto(f"/holds/{hold.public_id}")
    expect(page.get_by_role("heading", name=f"Pay {XSS}")).to_be_visible()
    item = page.get_by_role("group", name=f"Title {XSS}")
    expect(item).to_be_visible()
    expect(item.get_by_role("rowheader", name=XSS)).to_be_visible()
    expect(item.get_by_text(f"value {XSS}")).to_be_visible()
    expect(item.get_by_text(HTMX, exact=True)).to_be_visible()
    details = page.locator(".markdown")
    expect(details).to_contain_text(f"Details {XSS}")
    expect(details).to_contain_text(HTMX)
    expect(details).to_contain_text("[image: pic] http://evil.example/p.png")
    expect(details).to_contain_text("<script>alert(4)</script>")
    no_agent_markup(page)

    # The edit form and the last look (an HTMX fragment) carry the same text, as inert.
    item.get_by_label("Edit").check()
    expect(item.get_by_label(XSS, exact=True)).to_have_value(f"value {XSS}")
    page.get_by_label("Comment").fill(XSS)
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#last-look")).to_contain_text(f"Title {XSS}")
    expect(page.locator("#last-look")).to_contain_text(XSS)
    # Its low confidence asks for a second look, naming the agent's key as inert text too.
    expect(page.locator("#last-look")).to_contain_text(f"{XSS} has confidence 0.30")
    no_agent_markup(page)
    page.locator("#last-look").get_by_label("I looked at this").check()
    page.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    no_agent_markup(page)
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert resume["items"][0]["data"] == {XSS: f"value {XSS}", "payee": HTMX, "amount": "1.00"}
    assert resume["comment"] == XSS
    assert session.dialogs == [] and session.errors == [] and session.csp == []


def test_it_makes_hidden_and_bidi_characters_visible_and_flags_them(person_session, cap):
    body = factories.ask_body(
        intent="Pay\u200b Acme",
        items=[
            {
                "id": "INV-1",
                "title": "Acme",
                "data": {"iban": "DE89\u202e3704", "payee": "P\u0430yPal", "memo": "  padded  "},
            }
        ],
    )
    _, hold = factories.held_hold(cap, body)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Pay⟦U+200B⟧ Acme")
    item = page.get_by_role("group", name="Acme")
    expect(item.get_by_role("row", name="iban")).to_contain_text("DE89⟦U+202E⟧3704")
    expect(item.get_by_role("row", name="iban")).to_contain_text("hidden characters")
    expect(item.get_by_role("row", name="payee")).to_contain_text("mixed scripts: Latin with Cyrillic")
    expect(item.get_by_role("row", name="memo")).to_contain_text("leading and trailing space")


def test_it_makes_no_csp_violation_while_signing_in_reviewing_editing_and_deciding(session_factory, cap):
    factories.person("mona")
    _, hold = factories.held_hold(cap)
    session = session_factory()
    page = session.sign_in("mona")
    page.keyboard.press("?")
    expect(page.get_by_role("heading", name="Keyboard shortcuts")).to_be_visible()
    page.keyboard.press("Escape")
    page.get_by_role("link", name="Pay 2 invoices").click()
    first = page.get_by_role("group", name="Payee 1 · 100.00")
    first.get_by_label("Edit").check()
    first.get_by_label("amount", exact=True).fill("99.00")
    page.get_by_role("group", name="Payee 2 · 101.00").get_by_label("Reject").check()
    page.get_by_role("button", name="Submit decision").click()
    page.get_by_role("link", name="Back to the hold").click()
    expect(page.locator("#last-look")).to_be_hidden()
    page.get_by_role("button", name="Submit decision").click()
    page.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    page.wait_for_timeout(3_500)  # the delivery status refreshes itself once
    page.get_by_role("link", name="History").click()
    expect(page.get_by_role("link", name="Pay 2 invoices")).to_be_visible()
    assert page.evaluate("document.documentElement.classList.contains('js')"), "app.js did not run"
    assert session.csp == [], session.csp
    assert session.errors == []
