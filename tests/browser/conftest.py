"""Playwright against the app served by pytest-django's live_server, in Debian's Chromium.

Playwright's sync API runs its own event loop; Django would refuse database calls made from
this thread while a loop runs, hence DJANGO_ALLOW_ASYNC_UNSAFE (tests only).
"""

import os
from pathlib import Path

import pytest

from tests import factories
from tests.conftest import require

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
# Screenshots go here; RQ_TEST_ARTIFACTS puts them elsewhere (e.g. under /tmp, to look at them).
ARTIFACTS = Path(os.environ.get("RQ_TEST_ARTIFACTS") or ROOT / "test-artifacts")
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
PASSWORD = "pw-for-tests-1"

# Every CSP violation, on any page of the context, is reported to the test (survives navigation).
CSP_LISTENER = """
document.addEventListener('securitypolicyviolation', (e) => {
  window.__rqCsp && window.__rqCsp(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || ''));
});
"""


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        require("Chromium at /usr/bin/chromium", False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


class Session:
    """One browser context (a person's browser) with what the tests watch on it."""

    def __init__(self, browser, base_url: str, **options):
        options.setdefault("viewport", {"width": 1280, "height": 900})
        self.context = browser.new_context(base_url=base_url, **options)
        self.context.set_default_timeout(10_000)
        self.csp: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.context.expose_function("__rqCsp", lambda text: self.csp.append(text))
        self.context.add_init_script(CSP_LISTENER)
        self.page = self.context.new_page()
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on(
            "console",
            lambda msg: self.csp.append(msg.text) if "Content Security Policy" in msg.text else None,
        )

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def sign_in(self, username: str, password: str = PASSWORD):
        page = self.page
        page.goto("/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/")
        return page

    def close(self):
        self.context.close()


@pytest.fixture
def session_factory(browser, live_server):
    sessions = []

    def make(**options) -> Session:
        session = Session(browser, live_server.url, **options)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def person_session(session_factory):
    """A signed-in browser: person_session("mona", role="member") -> Session."""

    def make(username: str, role: str = "member", **options) -> Session:
        factories.person(username, role=role)
        session = session_factory(**options)
        session.sign_in(username)
        return session

    return make


def screenshot(page, name: str, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
