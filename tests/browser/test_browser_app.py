"""The installable app in Chromium: the manifest is linked and parsed, the service worker registers
and controls the pages, Chromium reports no installability errors, the pages work without the
worker, and the push control appears only where Web Push is set up."""

import io

import pytest
from django.core.management import call_command

from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.browser.test_browser_a11y import violations
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_app_installs_manifest_linked_and_service_worker_registered(person_session, cap):
    session = person_session("mona")
    page = session.page
    page.goto("/")
    scope = page.evaluate("navigator.serviceWorker.ready.then((r) => r.scope)")
    assert scope.endswith("/")
    page.reload()  # a page loaded after activation is controlled by the worker
    assert page.evaluate("navigator.serviceWorker.controller !== null")
    cdp = session.context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"].endswith("/manifest.webmanifest") and manifest["errors"] == []
    assert '"display": "standalone"' in manifest["data"]
    errors = [e["errorId"] for e in cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]]
    # Playwright's contexts are incognito, which Chromium reports by itself; any error of the app's
    # (manifest, icons, start_url, scope, service worker) would be listed beside it.
    assert errors == ["in-incognito"]
    # The worker caches nothing: a hold page still comes from the server, signed in.
    _, hold = factories.held_hold(cap)
    page.goto(f"/holds/{hold.public_id}")
    assert page.locator("h1").first.is_visible()
    assert page.locator("#push-on").is_hidden()  # no VAPID keys on this server
    assert session.errors == [] and session.csp == []


def test_the_pages_work_without_a_service_worker(person_session, cap):
    session = person_session("mona", service_workers="block")
    page = session.page
    _, hold = factories.held_hold(cap)
    page.goto("/")
    assert page.evaluate("navigator.serviceWorker.controller") is None
    page.get_by_role("link", name=hold.intent).first.click()
    page.wait_for_url(f"**/holds/{hold.public_id}")
    assert page.locator("#decision-form").is_visible()
    assert session.errors == [] and session.csp == []


def test_the_push_control_shows_where_web_push_is_set_up_and_the_team_page_slack_column_passes_axe(
    person_session, settings
):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    out = io.StringIO()
    call_command("vapid_keys", stdout=out)
    keys = dict(line.split("=", 1) for line in out.getvalue().split())
    settings.RQ_VAPID_PRIVATE_KEY = keys["RQ_VAPID_PRIVATE_KEY"]
    settings.RQ_VAPID_PUBLIC_KEY = keys["RQ_VAPID_PUBLIC_KEY"]
    session = person_session("alice", role="admin", bypass_csp=True)  # only axe needs it; CSP: the test above
    page = session.page
    page.goto("/")
    page.locator("#push-on").wait_for(state="visible")
    for name, size in (("team-slack-desktop", (1280, 800)), ("team-slack-phone", (390, 844))):
        page.set_viewport_size({"width": size[0], "height": size[1]})
        page.goto("/team")
        page.get_by_label("Slack member id of alice").wait_for()
        if size[0] >= 1280:
            assert violations(page) == [], name
        else:
            # At 390 px the admin's nav overflows and axe flags its off-screen links' contrast, on every
            # page and before this change (reported to the lead); the Slack column is in #main.
            page.add_script_tag(path=str(AXE))
            found = page.evaluate("axe.run('#main', {resultTypes: ['violations']}).then((r) => r.violations)")
            assert [v["id"] for v in found] == [], name
        screenshot(page, name, full_page=False)
    assert session.errors == []
