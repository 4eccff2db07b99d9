"""Issue 32 in Chromium: focus clear of the decide bar, the last look's second look, a phone that
decides (390 and 320 px), going on to the next hold, and no way to remove the last admin."""

import pytest
from playwright.sync_api import expect

from holds import services
from holds.auth import actor_for_user
from holds.models import Hold
from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The focused element's box and the decide bar's box, as the screen shows them.
FOCUS_AND_BAR = """() => {
  const el = document.activeElement, bar = document.querySelector('.decide-bar');
  if (!el || el === document.body || !bar) return null;
  const a = el.getBoundingClientRect(), b = bar.getBoundingClientRect();
  return {inBar: bar.contains(el), tag: el.tagName + '#' + el.id, top: a.top, bottom: a.bottom,
          barTop: b.top, barBottom: b.bottom, height: innerHeight, visible: a.width > 0 && a.height > 0};
}"""


def hidden_by_bar(box) -> bool:
    return bool(
        box and box["visible"] and not box["inBar"] and box["bottom"] > box["barTop"] and box["top"] < box["barBottom"]
    )


def test_the_decide_bar_never_hides_the_keyboard_focus(person_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=8, intent="Pay 8 invoices"))
    session = person_session("mona", viewport={"width": 1280, "height": 800})
    page = session.page
    page.goto(f"/holds/{hold.public_id}")
    page.locator("fieldset[data-item]").first.wait_for()
    hidden = []
    for _ in range(8):
        page.keyboard.press("j")
        box = page.evaluate(FOCUS_AND_BAR)
        assert box is not None and box["tag"].startswith("INPUT"), box
        if hidden_by_bar(box):
            hidden.append(("j", box))
    page.goto(f"/holds/{hold.public_id}")
    stops = 0
    for _ in range(80):
        page.keyboard.press("Tab")
        box = page.evaluate(FOCUS_AND_BAR)
        if box is None:
            continue
        stops += 1
        if hidden_by_bar(box):
            hidden.append(("Tab", box))
    assert stops > 40
    assert hidden == []
    bar = page.locator(".decide-bar").bounding_box()
    assert bar["height"] < 800 * 0.16, bar  # it covered 22 % of the screen


def risky_body():
    items = [
        {
            "id": "R-1",
            "title": "P\u0430yPal refund",  # a Cyrillic "а"
            "data": {"payee": "P\u0430yPal", "iban": "DE89\u200b3704", "amount": "50.00"},
            "confidence": {"amount": 0.31},
        },
        {"id": "R-2", "title": "Acme", "data": {"payee": "Acme"}, "confidence": {"payee": 0.99}},
    ]
    return factories.ask_body(items=items, intent="Refund 2 payments")


def test_the_last_look_asks_for_a_second_look_at_flags_low_confidence_and_a_claim(person_session, cap):
    _, hold = factories.held_hold(cap, risky_body())
    bea = factories.person("bea", role="member")
    services.hold_claim(hold_id=hold.pk, actor=actor_for_user(bea))
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("a")
    look = page.locator("#last-look")
    expect(look).to_be_visible()
    points = look.locator(".second-look li")
    text = " ".join(points.all_inner_texts())
    assert "mixed scripts" in text and "hidden characters" in text, text
    assert "amount has confidence 0.31" in text and "bea said they are on it" in text, text
    screenshot(page, "last-look-second-look", full_page=False)
    # Ctrl+Enter alone does not send it: the tick comes first.
    page.keyboard.press("Control+Enter")
    page.wait_for_timeout(300)
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING
    expect(look).to_be_visible()
    look.get_by_label("I looked at these").check()
    page.keyboard.press("Control+Enter")
    page.get_by_text("Decision recorded").wait_for()
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.DECIDED


def test_a_plain_hold_has_no_second_look(person_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(items=[risky_body()["items"][1]]))
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("a")
    expect(page.locator("#confirm-decision")).to_be_focused()
    assert page.locator(".second-look").count() == 0


def test_after_deciding_it_opens_the_next_hold_and_s_stays(person_session, cap):
    _, first = factories.held_hold(cap, factories.ask_body(intent="First", expires_in=3600))
    _, second = factories.held_hold(cap, factories.ask_body(intent="Second", expires_in=7200))
    page = person_session("mona").page
    page.goto(f"/holds/{first.public_id}")
    page.keyboard.press("a")
    expect(page.locator("#go-next")).to_be_checked()
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"**/holds/{second.public_id}")
    expect(page.get_by_text(f"Decision recorded on {first.public_id}")).to_be_visible()
    page.keyboard.press("a")
    expect(page.locator("#go-next")).to_be_checked()  # the last look is open
    page.keyboard.press("s")
    expect(page.locator("#go-next")).not_to_be_checked()
    page.keyboard.press("Control+Enter")
    page.get_by_text("Decision recorded").wait_for()
    assert page.url.endswith(f"/holds/{second.public_id}")
    # The choice is remembered.
    _, third = factories.held_hold(cap, factories.ask_body(intent="Third"))
    page.goto(f"/holds/{third.public_id}")
    page.keyboard.press("a")
    expect(page.locator("#go-next")).not_to_be_checked()


def fits(page) -> dict:
    return page.evaluate(
        "() => ({doc: document.documentElement.scrollWidth, view: document.documentElement.clientWidth})"
    )


@pytest.mark.parametrize("width,height", [(390, 844), (320, 640), (1280, 800)])
def test_a_phone_decides_and_so_does_a_desktop(person_session, cap, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=8, intent="Pay 8 invoices"))
    factories.held_hold(cap, factories.ask_body(intent="Pay one more invoice to a long-named payee"))
    session = person_session("alice", role="admin", viewport={"width": width, "height": height}, bypass_csp=True)
    page = session.page
    for url, name in (("/", "queue"), (f"/holds/{hold.public_id}", "hold"), ("/ops", "ops"), ("/team", "team")):
        page.goto(url)
        size = fits(page)
        assert size["doc"] <= size["view"], (url, size)
        assert violations(page) == [], url
        screenshot(page, f"size-{width}-{name}", full_page=False)

    page.goto(f"/holds/{hold.public_id}")
    approve_all = page.get_by_role("button", name="Approve all")
    box = approve_all.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, box  # reachable without scrolling
    approve_all.click()
    look = page.locator("#last-look")
    expect(look).to_be_visible()
    box = look.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["y"] >= 0 and box["y"] + box["height"] <= height
    assert violations(page) == [], "last look"
    screenshot(page, f"size-{width}-last-look", full_page=False)
    confirm = look.get_by_role("button", name="Confirm decision")
    confirm.scroll_into_view_if_needed()
    confirm.click()
    page.get_by_text("recorded").first.wait_for()
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.DECIDED


def test_the_only_admin_cannot_demote_themselves(person_session):
    page = person_session("alice", role="admin").page
    page.goto("/team")
    row = page.get_by_role("row", name="alice")
    row.get_by_label("Role of alice").select_option("member")
    row.get_by_role("button", name="Change").click()
    expect(page.get_by_role("heading", name="Change your own role to member?")).to_be_visible()
    page.get_by_role("button", name="Yes, make me member").click()
    expect(page.get_by_text("this is the last admin")).to_be_visible()
    assert page.url.endswith("/team#people") or "/team" in page.url
    page.goto("/team")  # still an admin
    expect(page.get_by_role("heading", name="People")).to_be_visible()


@pytest.mark.parametrize("width,height", [(390, 844), (1280, 800)])
def test_ops_sees_an_agent_that_is_down_and_then_answers_again(person_session, agent, acap, settings, width, height):
    """Issue 32 major 5: the real delivery path fails against a real HTTP agent that answers 502; after
    three attempts in a row /ops shows the endpoint failing (tile, section, the capability's row), and the
    label goes once the agent answers again."""
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    from django.utils import timezone

    from holds import delivery
    from holds.models import Invocation

    settings.RQ_ENDPOINT_FAILING_AFTER = 3
    settings.RQ_RETRY_SCHEDULE = [0] * 10
    agent.default = (502, b"down")
    invocation = Invocation.objects.get(run=factories.start_run(acap))

    def attempt():
        Invocation.objects.filter(pk=invocation.pk).update(next_attempt_at=timezone.now())
        delivery.deliver(invocation.pk)

    session = person_session("alice", role="admin", viewport={"width": width, "height": height}, bypass_csp=True)
    page = session.page
    for _ in range(3):
        attempt()
    page.goto("/ops")
    tile = page.locator(".ops-card", has_text="Failing endpoints")
    expect(tile).to_contain_text("1")
    expect(tile.get_by_role("link", name=acap.name)).to_be_visible()
    expect(page.get_by_role("heading", name="Failing endpoints")).to_be_visible()
    expect(page.get_by_text("endpoint failing").first).to_be_visible()
    size = fits(page)
    assert size["doc"] <= size["view"], size
    assert violations(page) == []
    screenshot(page, f"ops-failing-{width}", full_page=False)

    agent.default = (200, b'{"status": "completed", "output": {}}')
    attempt()
    page.goto("/ops")
    expect(page.get_by_text("endpoint failing")).to_have_count(0)
    expect(page.locator(".ops-card", has_text="Failing endpoints")).to_contain_text("0")
