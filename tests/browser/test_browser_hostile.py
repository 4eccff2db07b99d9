"""The hostile corpus in Chromium: every payload, every agent-written field, full pages and HTMX swaps.

One pending hold carries a payload in each item (id, title, data key and value, confidence key),
all payloads in its details and 20 in its file names; a decided twin echoes a payload in every
comment; one hold per payload carries it as its intent (queue and history). The payloads try to
set window.__pwned or open a dialog. A trap on window.__pwned reports any write, across navigations.
Checked on each page and after each HTMX swap: 0 dialogs, 0 writes, 0 CSP violations, 0 requests
off the origin, no hx-*/on* attribute from agent text, and the text shown exactly as written.
"""

import pytest
from playwright.sync_api import expect

from holds.rendering import json_text, reveal
from tests import factories
from tests.test_security_hostile import FILE_NAMES, TEXTS, build_world, clip, echo, hostile_items

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRAP = """
Object.defineProperty(window, '__pwned', {
  configurable: false,
  get() { return undefined; },
  set(v) { window.__rqPwned && window.__rqPwned(String(v)); },
});
"""

# Every element with an hx-* or data-hx-* attribute, every on* attribute, every dangerous URL or element.
AUDIT = """() => {
  const ours = new Set(['BODY', 'queue-rows', 'queue-filters', 'delivery', 'decision-form', 'history-rows',
                        'history-filters', 'presence', 'claim-form', 'bc-threshold', 'bc-preview-button']);
  const out = {hx: [], on: [], urls: [], tags: []};
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const name = a.name.toLowerCase();
      if (name.startsWith('hx-') || name.startsWith('data-hx-')) {
        const owner = el.tagName === 'BODY' ? 'BODY' : el.id;
        const hostile = a.value.includes('__pwned') || a.value.includes('evil.example');
        if (!ours.has(owner) || hostile) out.hx.push(el.outerHTML.slice(0, 120));
      }
      if (name.startsWith('on')) out.on.push(name);
      if (['href', 'src', 'action', 'formaction', 'srcdoc', 'data', 'xlink:href'].includes(name)
          && /^\\s*(javascript|data|vbscript):/i.test(a.value)) out.urls.push(name + '=' + a.value.slice(0, 60));
    }
  }
  const bad = 'main img, main svg, main iframe, main object, main embed, main math, main template, main style, ' +
              'main script, base, meta[http-equiv], dialog[open]:not(#last-look), button[form], [formaction], [srcdoc]';
  for (const el of document.querySelectorAll(bad)) out.tags.push(el.outerHTML.slice(0, 120));
  out.scripts = [...document.scripts].filter(s => !s.src || !s.src.startsWith(location.origin + '/static/')).length;
  return out;
}"""


class Watch:
    def __init__(self, session, origin: str):
        self.session = session
        self.writes: list[str] = []
        self.offsite: list[str] = []
        self.session.context.expose_function("__rqPwned", lambda value: self.writes.append(value))
        self.session.context.add_init_script(TRAP)
        self.session.context.on(
            "request", lambda request: None if request.url.startswith(origin) else self.offsite.append(request.url)
        )
        self.checked = 0

    def check(self, page, where: str):
        page.wait_for_timeout(150)  # let any handler that could fire, fire
        audit = page.evaluate(AUDIT)
        assert audit == {"hx": [], "on": [], "urls": [], "tags": [], "scripts": 0}, (where, audit)
        assert self.writes == [], (where, self.writes)
        assert self.session.dialogs == [], (where, self.session.dialogs)
        assert self.session.csp == [], (where, self.session.csp)
        assert self.offsite == [], (where, self.offsite)
        assert self.session.errors == [], (where, self.session.errors)
        self.checked += 1


def texts_of(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def assert_items_literal(page, scope: str = ""):
    """Each item's id, title, key and value read exactly as the agent wrote them."""
    items = hostile_items()
    ids = texts_of(page, f"{scope} fieldset[data-item] code.item-id")
    titles = texts_of(page, f"{scope} fieldset[data-item] .item-title")
    assert sorted(ids) == sorted(reveal(i["id"]) for i in items)
    assert sorted(titles) == sorted(reveal(i["title"]) for i in items)
    values = set(texts_of(page, f"{scope} fieldset[data-item] table.fields code.val-text"))
    keys = set(texts_of(page, f"{scope} fieldset[data-item] table.fields th.field-key"))
    for item in items:
        for key, value in item["data"].items():
            shown = reveal(value) if isinstance(value, str) else reveal(json_text(value))
            assert shown in values, key[:60]
            assert any(k.startswith(reveal(key)) for k in keys), key[:60]


def test_it_runs_none_of_the_corpus_in_full_pages_or_htmx_fragments(person_session, cap, live_server):
    world = build_world(cap)
    pending, decided = world["pending"], world["decided"]
    session = person_session("mona")
    watch = Watch(session, live_server.url)
    page = session.page

    # The queue, as a page and as an HTMX swap of its rows (the fragment htmx processes).
    page.goto("/")
    watch.check(page, "queue")
    intents = set(texts_of(page, "#queue-rows a.queue-link"))
    page.evaluate(
        "() => htmx.ajax('GET', document.querySelector('#queue-rows').getAttribute('hx-get'),"
        " {target: '#queue-rows', swap: 'outerHTML'})"
    )
    watch.check(page, "queue fragment")
    page.goto("/history")
    watch.check(page, "history")
    intents |= set(texts_of(page, "#history-rows a.queue-link"))
    page.evaluate("() => htmx.ajax('GET', '/history', {target: '#history-rows', swap: 'outerHTML'})")
    watch.check(page, "history fragment")
    intents |= set(texts_of(page, "#history-rows a.queue-link"))
    for hold in world["by_intent"] + [pending, decided]:
        if reveal(hold.intent) not in intents:
            page.goto(f"/holds/{hold.public_id}")
            expect(page.locator("h1.intent")).to_have_text(reveal(hold.intent))
            intents.add(reveal(hold.intent))
    assert {reveal(clip(t, 500)) for t in TEXTS} <= intents

    # The pending hold: every item, the details, the file names, as a full page.
    page.goto(f"/holds/{pending.public_id}")
    watch.check(page, "hold page")
    assert_items_literal(page)
    assert sorted(texts_of(page, "ul.files a")) == sorted(reveal(n) for n in FILE_NAMES)
    details = page.locator(".markdown").text_content()
    for text in TEXTS:
        if "<script>window.__pwned=1</script>" in text:
            assert "<script>window.__pwned=1</script>" in details

    # The 422 fragment: nothing chosen, so htmx swaps the whole form back with every item in it.
    page.locator("#submit-decision").click()
    expect(page.locator("#form-errors")).to_be_visible()
    watch.check(page, "422 fragment")
    assert_items_literal(page)

    # The last look (an HTMX fragment in a dialog) with a hostile comment, then the decision.
    comment = "\n".join(TEXTS[:12])
    page.get_by_label("Comment").fill(comment)
    page.locator("#approve-all").click()
    expect(page.locator("#last-look")).to_be_visible()
    watch.check(page, "last look fragment")
    assert page.locator("#last-look .comment-shown .pre").text_content() == comment
    page.locator("#second-look-ack").check()  # the flagged items ask for a second look first
    page.get_by_role("button", name="Confirm decision").click()
    expect(page.get_by_text("Decision recorded")).to_be_visible()
    watch.check(page, "decided")

    # The decided twin: every item's comment and the hold's comment echo a payload.
    page.goto(f"/holds/{decided.public_id}")
    watch.check(page, "decided hold page")
    comments = set(texts_of(page, ".item-outcome .pre"))
    assert {reveal(echo(i)) for i in range(len(hostile_items()))} == comments
    assert page.locator(".outcome .comment-shown .pre").text_content() == reveal(TEXTS[1])
    page.locator("details.payload summary").click()
    watch.check(page, "what the agent receives")

    assert watch.checked >= 10
    print(f"hostile corpus: {len(TEXTS) + 2} payloads, {watch.checked} pages/fragments checked, 0 executed")


def test_it_keeps_a_hostile_page_inert_while_htmx_refreshes_it(person_session, cap, live_server):
    """The queue swaps itself every 5 s: the swapped-in rows are as inert as the page."""
    for text in TEXTS[:20]:
        factories.held_hold(cap, factories.ask_body(intent=clip(text, 500), n_items=1))
    session = person_session("mona")
    watch = Watch(session, live_server.url)
    page = session.page
    page.goto("/")
    with page.expect_response(lambda r: "seen=" in r.url and r.request.headers.get("hx-request") == "true"):
        pass
    watch.check(page, "refreshed queue")
    assert {reveal(clip(t, 500)) for t in TEXTS[:20]} <= set(texts_of(page, "#queue-rows a.queue-link"))
