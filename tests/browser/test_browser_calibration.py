"""/calibration in Chromium: chart, table and flag, reached and filtered by keyboard, 0 axe violations."""

import pytest

from holds import services
from holds.auth import actor_for_account
from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def decided(cap, confidence: dict, action: str, bot):
    items = [{"id": "I-0", "title": "t", "data": {"amount": "1.00", "payee": "Acme"}, "confidence": confidence}]
    hold = factories.held_hold(cap, factories.ask_body(items=items))[1]
    services.hold_decide(hold_id=hold.pk, actor=bot, body={"items": [{"id": "I-0", "action": action}], "comment": "n"})


def decided_history(cap, bot):
    """22 decided holds whose amount is overconfident (a third rejected at 0.92-0.98) and payee spread out."""
    for n in range(22):
        decided(
            cap,
            {"amount": 0.92 + n % 3 * 0.03, "payee": 0.55 + n % 4 * 0.1},
            "reject" if n % 3 == 0 else "approve",
            bot,
        )


def test_calibration_page_by_keyboard_with_no_violations(person_session, cap):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    bot = actor_for_account(factories.account("bot", role="member")[0])
    other = factories.capability(name="refunds")
    decided_history(cap, bot)
    for n in range(6):
        decided(other, {"payee": 0.3 + n * 0.1}, "reject" if n < 2 else "approve", bot)
    session = person_session("vic", role="viewer", bypass_csp=True)
    page = session.page
    page.goto("/")
    page.get_by_role("link", name="Calibration").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/calibration")
    page.get_by_text("Overconfident field:").wait_for()
    assert page.locator("svg[role=img] polyline").count() == 3
    assert violations(page) == [], "calibration"
    screenshot(page, "calibration")
    page.get_by_label("Capability").focus()
    page.keyboard.press("ArrowDown")  # All -> pay_invoices
    page.keyboard.press("ArrowDown")  # -> refunds
    page.get_by_role("button", name="Show").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/calibration?capability=refunds")
    assert page.locator("svg[role=img] polyline").count() == 1
    assert page.get_by_text("Overconfident field:").count() == 0
    assert violations(page) == [], "calibration, filtered"
    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    assert download.value.suggested_filename == "calibration.csv"
    assert session.errors == [] and session.csp == []


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_the_chart_is_legible_at_desktop_and_phone_width(person_session, cap, width, height):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    bot = actor_for_account(factories.account("bot", role="member")[0])
    decided_history(cap, bot)
    session = person_session("vic", role="viewer", bypass_csp=True, viewport={"width": width, "height": height})
    page = session.page
    page.goto("/calibration")
    chart = page.locator("svg.chart")
    box = chart.bounding_box()
    # Desktop: the chart is drawn large (it was 300 px); a phone: it fits the screen, no sideways scroll.
    assert box["width"] >= (600 if width == 1280 else 300), box
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    smallest = page.evaluate(
        "Math.min(...[...document.querySelectorAll('svg.chart text')].map(t => t.getBoundingClientRect().height))"
    )
    assert smallest >= 11, f"the chart's smallest text is {smallest:.1f} px high"
    marks = page.evaluate("[...document.querySelectorAll('svg.chart .mark')].map(m => m.getBoundingClientRect().width)")
    assert marks and min(marks) >= 8, marks
    assert violations(page) == [], f"calibration at {width}"
    chart.scroll_into_view_if_needed()
    screenshot(page, f"calibration-chart-{width}")
    assert session.errors == []
