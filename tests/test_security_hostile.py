"""Hostile agent text (tests/data/hostile.json) through every agent-written field, in every page and fragment.

The fields: intent, item id, title, data keys and values, confidence keys, details, file names, and
the comments a decision echoes back. The pages: queue, history, the hold (pending and decided), the
last look, the refusal, each as a full page and as the HTMX fragment. Parsed here with html.parser
(fast, every payload on every page); tests/browser/test_browser_hostile.py runs the same data in Chromium.
"""

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from holds import services
from holds.auth import actor_for_account
from holds.models import Hold, ServiceAccount
from holds.rendering import json_text, visible
from holds.schemas import COMMENT_MAX_CHARS
from tests import factories

CORPUS = json.loads((Path(__file__).parent / "data" / "hostile.json").read_text())
PAYLOADS = CORPUS["payloads"]
TEXTS = [p["text"] for p in PAYLOADS if "text" in p]
VALUES = [p["value"] for p in PAYLOADS if "value" in p]
FLAG = CORPUS["flag"]
# File names may not hold slashes (the upload refuses them); these are the payloads that fit.
FILE_NAMES = [t for t in TEXTS if "/" not in t and "\\" not in t and len(t) <= 255][:20]

# The only elements of our own templates that carry hx-* attributes (by id, or the body).
OUR_HX = {
    "body",
    "queue-rows",
    "queue-filters",
    "history-filters",
    "delivery",
    "decision-form",
    "presence",
    "claim-form",
    "bc-threshold",
    "bc-preview-button",
}
OUR_DIALOGS = {"keys-help", "last-look"}
FORBIDDEN_TAGS = {"iframe", "object", "embed", "base", "img", "svg", "math", "template", "style", "noscript", "x"}


def clip(text: str, limit: int) -> str:
    """The payload's end is where its sting is (the script after 20,000 'A's), so keep the end."""
    return text if len(text) <= limit else text[-limit:]


def echo(i: int) -> str:
    """The comment an echoing decision gives item i: a payload, its end kept within a comment's limit."""
    return clip(TEXTS[i % len(TEXTS)], COMMENT_MAX_CHARS)


def item_id(i: int, text: str) -> str:
    return f"{i:02d}{clip(text, 198)}"


def hostile_items() -> list[dict]:
    items = [
        {"id": item_id(i, text), "title": clip(text, 1000), "data": {text: text, "n": i}, "confidence": {text: 0.3}}
        for i, text in enumerate(TEXTS)
    ]
    for j, value in enumerate(VALUES):
        key = f"deep {j} {TEXTS[j]}"
        items.append({"id": f"deep-{j}", "title": f"deep {j}", "data": {key: value}, "confidence": {key: 0.1}})
    assert len(items) <= 100
    return items


def hostile_ask(files=()) -> dict:
    return factories.ask_body(
        intent=clip(TEXTS[0], 500),
        items=hostile_items(),
        details="\n\n".join(TEXTS),
        files=list(files),
        expires_in=None,
    )


def hostile_files(run) -> list:
    return [
        factories.run_file(run, name=name, content=b"<script>window.__pwned=1</script>", content_type="text/html")
        for name in FILE_NAMES
    ]


def decide_with_echoes(hold: Hold) -> None:
    """Every item gets feedback with a payload as its comment, and the hold a payload comment."""
    account, _ = factories.account("echo-bot", role="member")
    items = [{"id": item["id"], "action": "feedback", "comment": echo(i)} for i, item in enumerate(hostile_items())]
    services.hold_decide(hold_id=hold.pk, actor=actor_for_account(account), body={"items": items, "comment": TEXTS[1]})


def build_world(cap, *, intents: bool = True) -> dict:
    """A pending hostile hold with files, a decided one with echoed comments, and one hold per intent."""
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    files = hostile_files(run)
    pending = services.hold_ask(invocation=invocation, body=hostile_ask([f.public_id for f in files]))
    factories.answer(invocation, {"status": "suspended", "hold_id": pending.public_id})
    _, decided = factories.held_hold(cap, hostile_ask())
    decide_with_echoes(decided)
    by_intent = []
    if intents:
        account = ServiceAccount.objects.get(name="echo-bot")
        for i, text in enumerate(TEXTS[1:], start=1):
            _, hold = factories.held_hold(cap, factories.ask_body(intent=clip(text, 500), n_items=1))
            if i % 2:  # half stay in the queue, half go to the history
                services.hold_decide(
                    hold_id=hold.pk,
                    actor=actor_for_account(account),
                    body={"items": [{"id": "INV-1", "action": "approve"}]},
                )
            by_intent.append(hold)
    return {"pending": pending, "decided": decided, "files": files, "by_intent": by_intent}


# --- what a page may contain ---------------------------------------------------------------------


class Page(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.scripts: list[dict] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = {name: value or "" for name, value in attrs}
        self.elements.append((tag, attrs))
        if tag == "script":
            self.scripts.append(attrs)


def assert_inert(html: str) -> None:
    """Nothing in the page came alive from agent text: no handler, no hx-*, no script, no dangerous element."""
    page = Page(html)
    hx_owners = set()
    for tag, attrs in page.elements:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name.startswith(("hx-", "data-hx-")):
                hx_owners.add("body" if tag == "body" else attrs.get("id", tag))
                assert FLAG not in value and "evil.example" not in value, (tag, name, value)
            if name in ("href", "src", "action", "formaction", "xlink:href", "data"):
                assert not value.strip().lower().startswith(("javascript:", "data:", "vbscript:")), (tag, name, value)
                assert "evil.example" not in value or tag == "a", (tag, name, value)
        assert tag not in FORBIDDEN_TAGS, (tag, attrs)
        assert "formaction" not in attrs and "srcdoc" not in attrs and "style" not in attrs, (tag, attrs)
        if tag == "dialog":
            assert attrs.get("id") in OUR_DIALOGS and "open" not in attrs, attrs
        if tag == "meta":
            assert "http-equiv" not in attrs, attrs
        if tag == "button":
            assert "form" not in attrs, attrs
        if tag == "input" and attrs.get("name") == "fingerprint":
            assert attrs.get("value") != "forged", attrs
    assert hx_owners <= OUR_HX, hx_owners
    for script in page.scripts:
        assert script.get("src", "").startswith("/static/"), script


def assert_shows(html: str, *texts: str) -> None:
    """Each text appears exactly as written: escaped once, hidden characters marked."""
    for text in texts:
        assert str(visible(text)) in html, text[:80]


# --- the tests -----------------------------------------------------------------------------------

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(cap):
    return build_world(cap)


@pytest.fixture
def signed_in(client, member):
    client.force_login(member)
    return client


def test_it_keeps_at_least_40_payloads_covering_every_class_of_attack():
    categories = {p["category"] for p in PAYLOADS}
    assert len(PAYLOADS) >= 40
    assert {
        "script",
        "event-handler",
        "url-scheme",
        "formaction",
        "htmx",
        "script-in-json",
        "template",
        "markdown",
        "svg",
        "long",
        "deep",
    } <= categories
    assert len(FILE_NAMES) == 20 and len(hostile_items()) <= 100


def test_it_accepts_the_hostile_ask_as_data_and_stores_it_unchanged(api, cap):
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    response = api.post("/v0/holds", hostile_ask(), token=token)
    assert response.status_code == 201, response.content
    hold = api.get(f"/v0/holds/{response.json()['hold_id']}", token=token).json()
    assert hold["intent"] == clip(TEXTS[0], 500) and hold["details"] == "\n\n".join(TEXTS)
    assert hold["items"] == hostile_items()


def test_it_renders_the_pending_hostile_hold_inert_and_literal(signed_in, world):
    hold = world["pending"]
    html = signed_in.get(f"/holds/{hold.public_id}").content.decode()
    assert_inert(html)
    for item in hostile_items():
        ((key, value),) = [(k, v) for k, v in item["data"].items() if k != "n"]
        shown = value if isinstance(value, str) else json_text(value)
        assert_shows(html, item["id"], item["title"], key, shown)
    assert_shows(html, clip(TEXTS[0], 500), *FILE_NAMES)
    # Details are markdown: raw HTML in them is text, so every tag an agent wrote reads as text.
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "{{ settings.SECRET_KEY }}" in html and "{% debug %}" in html


def test_it_renders_the_hostile_hold_as_htmx_fragments_inert(signed_in, world):
    hold = world["pending"]
    headers = {"HX-Request": "true", "HX-Target": "last-look-body"}
    review = signed_in.post(
        f"/holds/{hold.public_id}/review",
        {"fingerprint": hold.fingerprint, "approve_all": "1", "comment": "\n".join(TEXTS[:10])},
        headers=headers,
    )
    assert review.status_code == 200 and "<html" not in review.content.decode()
    assert_inert(review.content.decode())
    assert_shows(review.content.decode(), "\n".join(TEXTS[:10]), clip(TEXTS[0], 500))
    # Nothing chosen: the 422 fragment re-renders every item with its hostile text.
    invalid = signed_in.post(f"/holds/{hold.public_id}/review", {"fingerprint": hold.fingerprint}, headers=headers)
    assert invalid.status_code == 422 and "<html" not in invalid.content.decode()
    assert_inert(invalid.content.decode())
    assert_shows(invalid.content.decode(), *[i["title"] for i in hostile_items()])
    # A forged decision naming hostile ids: the refusal echoes them, as text.
    forged = json.dumps({"items": [{"id": t, "action": "approve"} for t in TEXTS[:20]], "comment": TEXTS[2]})
    refused = signed_in.post(
        f"/holds/{hold.public_id}/decision", {"decision": forged, "fingerprint": hold.fingerprint}, headers=headers
    )
    assert refused.status_code == 422
    assert_inert(refused.content.decode())
    assert_shows(refused.content.decode(), TEXTS[5])


def test_it_renders_the_decided_hold_with_every_echoed_comment_inert_and_literal(signed_in, world):
    html = signed_in.get(f"/holds/{world['decided'].public_id}").content.decode()
    assert_inert(html)
    assert_shows(html, *(echo(i) for i in range(len(TEXTS))))  # each item's feedback comment, and the hold's


def test_it_renders_every_hostile_intent_in_the_queue_the_history_and_their_fragments(signed_in, world):
    pages = []
    for path in ("/", "/?after=", "/history"):
        pages.append(signed_in.get(path).content.decode())
        pages.append(signed_in.get(path, headers={"HX-Request": "true"}).content.decode())
    pages.append(signed_in.get("/?all=1").content.decode())
    for html in pages:
        assert_inert(html)
    shown = "".join(pages)
    queue_more = signed_in.get("/").context["page"].next_cursor
    if queue_more:
        more = signed_in.get(f"/?after={queue_more}", headers={"HX-Request": "true"}).content.decode()
        assert_inert(more)
        shown += more
    assert_shows(shown, *[clip(t, 500) for t in TEXTS])
    for hold in world["by_intent"]:
        page = signed_in.get(f"/holds/{hold.public_id}").content.decode()
        assert_inert(page)
        assert_shows(page, hold.intent)


def test_it_serves_hostile_file_names_as_attachments_with_no_header_injection(signed_in, world):
    for run_file in world["files"]:
        response = signed_in.get(f"/files/{run_file.public_id}")
        assert response.status_code == 200
        disposition = response["Content-Disposition"]
        assert disposition.startswith("attachment;") and "\n" not in disposition and "\r" not in disposition
        assert response["Content-Type"] == "application/octet-stream"
        assert response["Content-Security-Policy"] == "sandbox"
        assert len(response.headers) < 20  # nothing smuggled in as extra headers
