"""Quorum in Chromium: two reviewers approve in two browsers; the agent is resumed once, after the second."""

import pytest
from playwright.sync_api import expect

from holds import delivery
from holds.models import Invocation
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def approve_all(page, hold, second_look: str | None = None):
    """`second_look`: what the last look is expected to flag; a person then ticks "I looked at this"
    (issue 32: required when someone else has the hold open or items are flagged) before confirming."""
    page.goto(f"/holds/{hold.public_id}")
    for title in ("Payee 1 · 100.00", "Payee 2 · 101.00"):
        page.get_by_role("group", name=title).get_by_label("Approve").check()
    page.get_by_role("button", name="Submit decision").click()
    look = page.locator("#last-look")
    if second_look is not None:
        expect(look).to_contain_text(second_look)
        look.get_by_label("I looked at this").check()
    look.get_by_role("button", name="Confirm decision").click()


def test_two_reviewers_in_two_browsers_resume_the_agent_once(person_session, agent):
    ann, bob = person_session("ann"), person_session("bob")
    cap = factories.capability("pay_big", endpoint=agent.url, quorum={"approvals": 2, "from": ["member"]})
    _, hold = factories.held_hold(cap)

    approve_all(ann.page, hold)
    expect(ann.page.get_by_text("Approval recorded. 1 more approval needed.")).to_be_visible()
    panel = ann.page.locator("section.quorum")
    expect(panel.locator("[data-approval]")).to_have_count(1)
    expect(panel).to_contain_text("ann")
    expect(panel).to_contain_text("1 of 2")
    screenshot(ann.page, "quorum-one-of-two")
    assert not Invocation.objects.filter(hold=hold, kind="resume").exists()

    # ann's second try is refused, naming her approval; nothing more is counted.
    approve_all(ann.page, hold)
    expect(ann.page.get_by_text("you already approved this hold")).to_be_visible()

    # ann still has the hold open, so bob's last look asks him to tick that he looked before confirming.
    approve_all(bob.page, hold, second_look="ann has this hold open now.")
    expect(bob.page.get_by_text("Decision recorded")).to_be_visible()
    expect(bob.page.locator(".outcome-line").first).to_contain_text("ann, bob")
    screenshot(bob.page, "quorum-decided")

    (resume,) = Invocation.objects.filter(hold=hold, kind="resume")
    assert delivery.deliver(resume.id) == "answered"
    resumed = [r for r in agent.requests if r["body"]["resume"] is not None]
    assert len(resumed) == 1
    assert {i["action"] for i in resumed[0]["body"]["resume"]["items"]} == {"approve"}
