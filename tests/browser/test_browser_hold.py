"""Deciding in Chromium: typed edits, the comment rule, feedback, once-only, roles, no JavaScript."""

import re

import pytest
from playwright.sync_api import expect

from holds.models import AuditEvent, Hold, Invocation
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def typed_body():
    return factories.ask_body(
        intent="Pay 2 invoices",
        items=[
            {
                "id": "INV-1",
                "title": "Aksa Lojistik · 18400",
                "data": {"payee": "Aksa Lojistik", "amount": 18400, "rate": 0.25, "urgent": False, "note": None},
                "confidence": {"amount": 0.42, "payee": 0.93},
            },
            {
                "id": "INV-2",
                "title": "Acme · 120.00",
                "data": {"payee": "Acme", "amount": "120.00", "lines": [{"sku": "A-1", "qty": 2}]},
                "confidence": {"amount": 0.7},
            },
        ],
        details="Approve to pay as shown, **edit** the payee or amount first, or reject.",
    )


def resume_of(hold):
    return Invocation.objects.get(hold=hold, kind="resume").resume


def test_it_sends_an_edited_number_as_a_number(person_session, cap):
    _, hold = factories.held_hold(cap, typed_body())
    session = person_session("mona")
    page = session.page
    page.goto(f"/holds/{hold.public_id}")
    screenshot(page, "hold")
    first = page.get_by_role("group", name="Aksa Lojistik · 18400")
    first.get_by_label("Edit").check()
    expect(first.get_by_label("amount", exact=True)).to_be_visible()
    first.get_by_label("amount", exact=True).fill("18500")
    first.get_by_label("rate", exact=True).fill("0.5")
    first.get_by_label("urgent", exact=True).check()
    page.get_by_role("group", name="Acme · 120.00").get_by_label("Approve").check()
    screenshot(page, "hold-editing")
    page.get_by_role("button", name="Submit decision").click()
    look = page.locator("#last-look")
    expect(look).to_be_visible()
    expect(look.locator("table.changes tr", has_text="amount")).to_contain_text("18400")
    expect(look.locator("table.changes tr", has_text="amount")).to_contain_text("18500")
    screenshot(page, "last-look", full_page=False)
    look.get_by_label("I looked at this").check()  # amount's confidence 0.42 is below 0.5
    look.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    screenshot(page, "outcome")
    data = resume_of(hold)["items"][0]["data"]
    assert data == {"payee": "Aksa Lojistik", "amount": 18500, "rate": 0.5, "urgent": True, "note": None}
    assert type(data["amount"]) is int and type(data["rate"]) is float and data["urgent"] is True
    assert resume_of(hold)["items"][1] == {
        "id": "INV-2",
        "action": "approve",
        "data": {"payee": "Acme", "amount": "120.00", "lines": [{"sku": "A-1", "qty": 2}]},
        "comment": None,
    }
    assert session.csp == [] and session.errors == []


def test_it_shows_a_type_error_next_to_the_field_and_decides_nothing(person_session, cap):
    _, hold = factories.held_hold(cap, typed_body())
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    first = page.get_by_role("group", name="Aksa Lojistik · 18400")
    first.get_by_label("Edit").check()
    first.get_by_label("amount", exact=True).fill("18.5")  # any number fits a number
    page.get_by_role("group", name="Acme · 120.00").get_by_label("Edit").check()
    page.get_by_role("group", name="Acme · 120.00").get_by_label("lines", exact=True).fill("[{")
    page.get_by_role("button", name="Submit decision").click()
    expect(page.get_by_role("group", name="Acme · 120.00").get_by_text("Enter valid JSON")).to_be_visible()
    expect(first.get_by_label("amount", exact=True)).to_have_value("18.5")
    expect(page.locator("#last-look")).to_be_hidden()
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_copies_the_hold_comment_onto_a_rejected_item(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.get_by_role("group", name="Payee 1 · 100.00").get_by_label("Reject").check()
    page.get_by_role("group", name="Payee 2 · 101.00").get_by_label("Approve").check()
    page.get_by_label("Comment").fill("paid last week")
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#last-look")).to_contain_text("copied to 1 item")
    page.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    resume = resume_of(hold)
    assert resume["comment"] == "paid last week"
    assert [(i["action"], i["comment"]) for i in resume["items"]] == [
        ("reject", "paid last week"),
        ("approve", None),
    ]


def test_it_refuses_feedback_without_a_comment(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.get_by_role("group", name="Payee 1 · 100.00").get_by_label("Feedback").check()
    page.get_by_role("group", name="Payee 2 · 101.00").get_by_label("Approve").check()
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#comment-error")).to_have_text("Feedback needs a comment.")
    expect(page.locator("#last-look")).to_be_hidden()
    assert not Invocation.objects.filter(hold=hold, kind="resume").exists()
    page.get_by_label("Comment").fill("Which account?")
    page.get_by_role("button", name="Submit decision").click()
    page.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    assert resume_of(hold)["items"][0] == {
        "id": "INV-1",
        "action": "feedback",
        "data": {"payee": "Payee 1", "amount": "100.00"},
        "comment": "Which account?",
    }


def test_it_decides_once_when_submit_and_confirm_are_double_clicked(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.get_by_role("button", name="Approve all").dblclick()
    page.get_by_role("button", name="Confirm decision").dblclick()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
    assert AuditEvent.objects.filter(kind="hold.decided", hold_id_ref=hold.pk).count() == 1


def test_it_decides_once_without_javascript_even_when_double_clicked(person_session, cap):
    _, hold = factories.held_hold(cap)
    session = person_session("mona", java_script_enabled=False)
    page = session.page
    page.goto(f"/holds/{hold.public_id}")
    page.get_by_role("group", name="Payee 1 · 100.00").get_by_label("Edit").check()
    page.get_by_role("group", name="Payee 1 · 100.00").get_by_label("payee", exact=True).fill("Payee One Ltd")
    page.get_by_role("group", name="Payee 2 · 101.00").get_by_label("Approve").check()
    page.get_by_role("button", name="Submit decision").click()
    expect(page.get_by_role("heading", name="Last look before you decide")).to_be_visible()
    page.get_by_role("button", name="Confirm decision").dblclick()
    # The browser shows the last response: the outcome, or "you decided" if the second post came back last.
    expect(page.get_by_text(re.compile("Decision recorded|You decided"))).to_be_visible()
    assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
    assert resume_of(hold)["items"][0]["data"] == {"payee": "Payee One Ltd", "amount": "100.00"}
    assert AuditEvent.objects.filter(kind="hold.decided", hold_id_ref=hold.pk).count() == 1


def test_it_tells_a_second_browser_that_the_hold_is_already_decided(person_session, cap):
    _, hold = factories.held_hold(cap)
    first = person_session("mona").page
    second = person_session("otto").page
    for page in (first, second):
        page.goto(f"/holds/{hold.public_id}")
    second.get_by_role("button", name="Approve all").click()
    expect(second.locator("#last-look")).to_be_visible()
    first.get_by_role("button", name="Approve all").click()
    first.get_by_label("I looked at this").check()  # otto has it open too
    first.get_by_role("button", name="Confirm decision").click()
    expect(first.get_by_text("Decision recorded")).to_be_visible()
    second.get_by_label("I looked at this").check()  # mona has it open
    with second.expect_response(lambda r: r.request.method == "POST") as posted:
        second.get_by_role("button", name="Confirm decision").click()
    assert posted.value.status == 409
    expect(second.get_by_role("heading", name="Already decided")).to_be_visible()
    expect(second.get_by_text("was decided by mona")).to_be_visible()
    assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
    assert Hold.objects.get(pk=hold.pk).decided_by == "mona"


def test_it_shows_a_viewer_the_hold_read_only_and_refuses_their_post(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("vic", role="viewer").page
    page.goto(f"/holds/{hold.public_id}")
    expect(page.get_by_text("Read-only.")).to_be_visible()
    expect(page.get_by_role("radio")).to_have_count(0)
    expect(page.get_by_role("button", name="Submit decision")).to_have_count(0)
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for path in ("review", "decision"):
        response = page.request.post(
            f"/holds/{hold.public_id}/{path}",
            form={
                "item-0-action": "approve",
                "item-1-action": "approve",
                "fingerprint": hold.fingerprint,
                "decision": '{"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}',
            },
            headers={"X-CSRFToken": token, "Referer": page.url},
        )
        assert response.status == 403, path
    assert Hold.objects.get(pk=hold.pk).status == "pending"
