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


# Each major of issue 32 is shown at a desktop's size and at a phone's.
SIZES = [(1280, 800), (390, 844)]


def fits(page) -> dict:
    return page.evaluate(
        "() => ({doc: document.documentElement.scrollWidth, view: document.documentElement.clientWidth})"
    )


def looked_at(page, name: str, width: int) -> None:
    """The page fits its width, axe finds nothing, and a screenshot is kept to look at."""
    size = fits(page)
    assert size["doc"] <= size["view"], (name, size)
    assert violations(page) == [], name
    screenshot(page, f"{name}-{width}", full_page=False)


def inside_screen(box, width: int, height: int) -> bool:
    return box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height


@pytest.mark.parametrize("width,height", SIZES)
def test_the_decide_bar_never_hides_the_keyboard_focus(person_session, cap, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=8, intent="Pay 8 invoices"))
    session = person_session("mona", viewport={"width": width, "height": height}, bypass_csp=True)
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
    looked_at(page, "focus-j", width)
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
    assert bar["height"] < height * 0.16, bar  # it covered 22 % of the screen

    # The approve-by-confidence preview opens above the bar, its button to apply it in view.
    page.goto(f"/holds/{hold.public_id}")
    page.locator("#by-confidence summary").click()
    page.locator("#bc-threshold").select_option("0.5")
    apply = page.locator("#bc-apply")
    expect(apply).to_be_visible()
    page.wait_for_timeout(200)  # the scroll that follows the swap
    box, bar = apply.bounding_box(), page.locator(".decide-bar").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= bar["y"], (box, bar)
    looked_at(page, "by-confidence-preview", width)


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


def approve_all(page, width: int) -> None:
    """`a` on a desktop; a phone has no keyboard and taps the button."""
    if width > 720:
        page.keyboard.press("a")
    else:
        page.get_by_role("button", name="Approve all").click()


@pytest.mark.parametrize("width,height", SIZES)
def test_the_last_look_asks_for_a_second_look_at_flags_low_confidence_and_a_claim(person_session, cap, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, hold = factories.held_hold(cap, risky_body())
    bea = factories.person("bea", role="member")
    services.hold_claim(hold_id=hold.pk, actor=actor_for_user(bea))
    page = person_session("mona", viewport={"width": width, "height": height}, bypass_csp=True).page
    page.goto(f"/holds/{hold.public_id}")
    approve_all(page, width)
    look = page.locator("#last-look")
    expect(look).to_be_visible()
    points = look.locator(".second-look li")
    text = " ".join(points.all_inner_texts())
    assert "mixed scripts" in text and "hidden characters" in text, text
    assert "amount has confidence 0.31" in text and "bea said they are on it" in text, text
    assert inside_screen(look.bounding_box(), width, height), look.bounding_box()
    ack = look.get_by_label("I looked at these")
    ack.scroll_into_view_if_needed()
    assert inside_screen(ack.bounding_box(), width, height)
    looked_at(page, "last-look-second-look", width)
    # Neither Ctrl+Enter nor Confirm alone sends it: the tick comes first.
    page.keyboard.press("Control+Enter")
    look.get_by_role("button", name="Confirm decision").click()
    page.wait_for_timeout(300)
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING
    expect(look).to_be_visible()
    ack.check()
    if width > 720:
        page.keyboard.press("Control+Enter")
    else:
        look.get_by_role("button", name="Confirm decision").click()
    page.get_by_text("Decision recorded").wait_for()
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.DECIDED


def test_a_plain_hold_has_no_second_look(person_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(items=[risky_body()["items"][1]]))
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    page.keyboard.press("a")
    expect(page.locator("#confirm-decision")).to_be_focused()
    assert page.locator(".second-look").count() == 0


@pytest.mark.parametrize("width,height", SIZES)
def test_after_deciding_it_opens_the_next_hold_and_s_stays(person_session, cap, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    _, first = factories.held_hold(cap, factories.ask_body(intent="First", expires_in=3600))
    _, second = factories.held_hold(cap, factories.ask_body(intent="Second", expires_in=7200))
    page = person_session("mona", viewport={"width": width, "height": height}, bypass_csp=True).page
    phone = width <= 720
    page.goto(f"/holds/{first.public_id}")
    approve_all(page, width)
    go_next = page.locator("#go-next")
    expect(go_next).to_be_checked()
    assert inside_screen(page.locator("#last-look").bounding_box(), width, height)
    looked_at(page, "last-look-go-next", width)
    if phone:
        page.get_by_role("button", name="Confirm decision").click()
    else:
        page.keyboard.press("Control+Enter")
    page.wait_for_url(f"**/holds/{second.public_id}")
    expect(page.get_by_text(f"Decision recorded on {first.public_id}")).to_be_visible()
    looked_at(page, "next-hold", width)
    approve_all(page, width)
    expect(go_next).to_be_checked()  # the last look is open
    if phone:
        go_next.uncheck()
        page.get_by_role("button", name="Confirm decision").click()
    else:
        page.keyboard.press("s")
        expect(go_next).not_to_be_checked()
        page.keyboard.press("Control+Enter")
    page.get_by_text("Decision recorded").wait_for()
    assert page.url.endswith(f"/holds/{second.public_id}")
    # The choice is remembered.
    _, third = factories.held_hold(cap, factories.ask_body(intent="Third"))
    page.goto(f"/holds/{third.public_id}")
    approve_all(page, width)
    expect(go_next).not_to_be_checked()


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


@pytest.mark.parametrize("width,height", SIZES)
def test_the_only_admin_cannot_demote_themselves(person_session, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    page = person_session("alice", role="admin", viewport={"width": width, "height": height}, bypass_csp=True).page
    page.goto("/team")
    looked_at(page, "team", width)
    row = page.get_by_role("row", name="alice")
    row.get_by_label("Role of alice").select_option("member")
    row.get_by_role("button", name="Change").click()
    expect(page.get_by_role("heading", name="Change your own role to member?")).to_be_visible()
    looked_at(page, "team-confirm-own-role", width)
    page.get_by_role("button", name="Yes, make me member").click()
    expect(page.get_by_text("this is the last admin")).to_be_visible()
    assert "/team" in page.url
    looked_at(page, "team-last-admin-refused", width)
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


# --- the hold page's minors -----------------------------------------------------------------------


def test_a_page_whose_hold_was_decided_elsewhere_says_so_within_one_poll(person_session, cap, monkeypatch):
    monkeypatch.setattr("holds.presence.POLL_SECONDS", 1)
    _, hold = factories.held_hold(cap)
    ana = factories.person("ana", role="member")
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    expect(page.locator("#submit-decision")).to_be_visible()
    expect(page.locator("#extend")).to_be_visible()
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "reject"}]}
    services.hold_decide(hold_id=hold.pk, actor=actor_for_user(ana), body=body)
    expect(page.get_by_role("alert").filter(has_text="Decided meanwhile by ana")).to_be_visible(timeout=4000)
    for gone in ("#submit-decision", "#approve-all", "#extend", "#by-confidence"):
        expect(page.locator(gone)).to_have_count(0)
    expect(page.get_by_text("Nothing to submit")).to_be_visible()
    page.keyboard.press("a")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#last-look")).not_to_be_visible()
    screenshot(page, "decided-meanwhile", full_page=False)
    page.get_by_role("link", name="Reload to see the outcome").click()
    expect(page.get_by_role("heading", name="Outcome")).to_be_visible()


def test_a_double_submit_sends_one_request(person_session, cap):
    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    sent = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/review") else None)
    # Two clicks in one task: the second comes while the first request is on its way.
    page.evaluate("() => { const b = document.getElementById('approve-all'); b.click(); b.click(); }")
    expect(page.locator("#last-look")).to_be_visible()
    page.wait_for_timeout(500)
    assert len(sent) == 1, sent


def test_the_comment_counts_to_its_limit_and_asked_ago_moves_on(person_session, cap):
    from holds.schemas import COMMENT_MAX_CHARS

    _, hold = factories.held_hold(cap)
    page = person_session("mona").page
    page.goto(f"/holds/{hold.public_id}")
    counter = page.locator("#comment-count")
    expect(counter).to_have_text(f"0 of {COMMENT_MAX_CHARS} characters")
    page.locator("#comment").fill("\U0001f600" * (COMMENT_MAX_CHARS + 1))  # one character each, as the server counts
    expect(counter).to_have_text(f"{COMMENT_MAX_CHARS + 1} of {COMMENT_MAX_CHARS} characters: 1 too many")
    page.get_by_role("button", name="Approve all").click()
    expect(page.locator("#comment-error")).to_contain_text(f"A comment is limited to {COMMENT_MAX_CHARS} characters")
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING
    asked = page.locator("[data-age]")
    before = asked.inner_text()
    page.wait_for_timeout(2200)
    assert asked.inner_text() != before and asked.inner_text().endswith("s ago"), (before, asked.inner_text())
    assert page.request.get("/favicon.ico").status == 200


def test_the_error_summary_links_to_the_field_and_an_enum_is_picked(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    schema = {
        "type": "object",
        "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "currency": {"enum": ["EUR", "USD"]}},
    }
    item = {"id": "S", "title": "Office", "data": {"zip": "10115", "currency": "EUR", "note": None}, "schema": schema}
    _, hold = factories.held_hold(cap, factories.ask_body(items=[item]))
    page = person_session("mona", bypass_csp=True).page
    page.goto(f"/holds/{hold.public_id}")
    page.get_by_label("Edit").check()
    page.get_by_label("zip").fill("ABCDE")
    page.get_by_label("currency").select_option("USD")
    page.locator("#item-0-f-2").fill("plain words")  # the null field: typing unticks "null"
    expect(page.get_by_label("note: null")).not_to_be_checked()
    page.get_by_role("button", name="Submit decision").click()
    link = page.locator("#form-errors a", has_text='"ABCDE" is not in the expected format (pattern ^[0-9]{5}$)')
    expect(link).to_be_visible()
    assert violations(page) == []
    screenshot(page, "hold-error-summary", full_page=False)
    link.click()
    expect(page.get_by_label("zip")).to_be_focused()
    page.get_by_label("zip").fill("10117")
    page.get_by_role("button", name="Submit decision").click()
    look = page.locator("#last-look")
    expect(look).to_be_visible()
    decision = look.locator("input[name=decision]").input_value()
    assert '"currency": "USD"' in decision and '"note": "plain words"' in decision, decision
