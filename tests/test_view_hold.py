"""The hold page, its last look and the decision: typed edits, refusals with their codes, no JS needed."""

import html
import json
import re

import pytest

from holds import services
from holds.models import AuditEvent, Hold, Invocation
from tests import factories

pytestmark = pytest.mark.django_db


def typed_body(n_items=1):
    items = [
        {
            "id": f"INV-{i + 1}",
            "title": f"Item {i + 1}",
            "data": {
                "payee": "Acme",
                "amount": 120,
                "rate": 0.25,
                "urgent": False,
                "note": None,
                "lines": [{"sku": "A", "qty": 2}],
                "memo": "line one\nline two",
            },
            "confidence": {"amount": 0.4, "payee": 0.9},
        }
        for i in range(n_items)
    ]
    return factories.ask_body(items=items)


def url(hold, suffix=""):
    return f"/holds/{hold.public_id}{suffix}"


def review_post(client, hold, data, **headers):
    return client.post(url(hold, "/review"), {"fingerprint": hold.fingerprint, **data}, headers=headers or None)


def confirmed(response) -> str:
    return html.unescape(re.search(r'name="decision" value="([^"]*)"', response.content.decode()).group(1))


def unchanged(prefix="item-0"):
    """The edit inputs as the page fills them (a browser posts every field of the form)."""
    return {
        f"{prefix}-f-0": "Acme",
        f"{prefix}-f-1": "120",
        f"{prefix}-f-2": "0.25",
        f"{prefix}-f-4-null": "null",
        f"{prefix}-f-4": "",
        f"{prefix}-f-5": '[{"sku": "A", "qty": 2}]',
        f"{prefix}-f-6": "line one\r\nline two",
    }


@pytest.fixture
def signed_in(client, member):
    client.force_login(member)
    return client


def test_it_shows_the_hold_with_every_value_typed_and_in_full(signed_in, cap):
    run, hold = factories.held_hold(cap, typed_body())
    body = signed_in.get(url(hold)).content.decode()
    assert "Pay 2 invoices" in body and "pay_invoices" in body and run.public_id in body
    assert "Started by" in body and "Time left" in body and 'data-countdown="' in body
    for shown, kind in (
        ("Acme", "string"),
        ("120", "integer"),
        ("0.25", "number"),
        ("false", "boolean"),
        ("null", "null"),
    ):
        assert re.search(rf'<code class="val-text">{shown}</code>.*?<span class="type-tag">{kind}</span>', body, re.S)
    assert "line one\nline two" in body  # multi-line strings in full, not truncated
    assert "&quot;qty&quot;: 2" in body  # nested JSON, indented
    assert 'class="conf conf-red" title="0.4">0.40' in body and 'class="conf" title="0.9">0.90' in body


def test_it_offers_only_the_holds_actions_as_labelled_radios(signed_in, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(actions=["approve", "reject"]))
    body = signed_in.get(url(hold)).content.decode()
    assert body.count('value="approve"') == 2 and body.count('value="reject"') == 2
    assert 'value="edit"' not in body and 'value="feedback"' not in body
    assert "> Approve</label>" in body and "Approve all" in body and ">Comment</label>" in body
    assert "<fieldset" in body and "<legend>" in body


def test_it_puts_flagged_and_low_confidence_items_first(signed_in, cap):
    items = [
        {"id": "calm", "title": "Calm", "data": {"a": "x"}, "confidence": {"a": 0.95}},
        {"id": "amber", "title": "Amber", "data": {"a": "x"}, "confidence": {"a": 0.7}},
        {"id": "hidden", "title": "Hidden", "data": {"a": "x\u200by"}},
        {"id": "red", "title": "Red", "data": {"a": "x"}, "confidence": {"a": 0.2}},
    ]
    _, hold = factories.held_hold(cap, factories.ask_body(items=items))
    body = signed_in.get(url(hold)).content.decode()
    order = re.findall(r'<span class="item-title">(\w+)</span>', body)
    assert order == ["Hidden", "Red", "Amber", "Calm"]


def test_it_uses_the_same_number_of_queries_for_1_and_100_items(signed_in, cap, django_assert_num_queries):
    _, one = factories.held_hold(cap, typed_body(1))
    counts = []
    for hold in (one, factories.held_hold(cap, typed_body(100))[1]):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as ctx:
            response = signed_in.get(url(hold))
        assert response.status_code == 200
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1], counts
    with django_assert_num_queries(counts[0]):
        signed_in.get(url(one))


def test_it_answers_404_for_an_unknown_hold(signed_in):
    assert signed_in.get("/holds/h_999").status_code == 404
    assert signed_in.get("/holds/nonsense").status_code == 404


def test_it_shows_the_last_look_then_decides_once_with_a_typed_edit(signed_in, cap):
    _, hold = factories.held_hold(cap, typed_body())
    data = {
        **unchanged(),
        "item-0-action": "edit",
        "item-0-f-1": "125",
        "item-0-f-2": "0.5",
        "item-0-f-3": "true",
        "comment": "  ",
    }
    look = review_post(signed_in, hold, data)
    assert look.status_code == 200
    text = look.content.decode()
    assert "Last look before you decide" in text and "Confirm decision" in text
    assert re.search(r">amount<.*?120.*?→.*?125", text, re.S) and ">payee<" not in text  # only changed fields
    assert Hold.objects.get(pk=hold.pk).status == "pending"  # the last look writes nothing
    response = signed_in.post(url(hold, "/decision"), {"decision": confirmed(look), "fingerprint": hold.fingerprint})
    assert response.status_code == 303 and response["Location"] == url(hold)
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert resume["items"][0]["data"] == {
        "payee": "Acme",
        "amount": 125,
        "rate": 0.5,
        "urgent": True,
        "note": None,
        "lines": [{"sku": "A", "qty": 2}],
        "memo": "line one\nline two",
    }
    assert type(resume["items"][0]["data"]["amount"]) is int
    page = signed_in.get(url(hold)).content.decode()
    assert "Decision recorded" in page and "Decided by <strong>mona</strong>" in page and "Resume" in page


def test_it_refuses_wrong_types_next_to_the_field_with_422(signed_in, cap):
    _, hold = factories.held_hold(cap, typed_body())
    data = {
        **unchanged(),
        "item-0-action": "edit",
        "item-0-f-1": "twelve",
        "item-0-f-2": "NaN",
        "item-0-f-4-null": "",
        "item-0-f-4": "",
        "item-0-f-5": "[1,",
    }
    response = review_post(signed_in, hold, data)
    assert response.status_code == 422
    text = response.content.decode()
    assert 'id="item-0-f-1-error">Enter a number, such as 12 or 12.5' in text
    assert 'id="item-0-f-2-error">Enter a number' in text
    assert 'id="item-0-f-4-error">Type a value, or tick null.' in text
    assert 'id="item-0-f-5-error">Enter valid JSON' in text
    assert 'value="twelve"' in text  # what the person typed stays in the field


def test_it_turns_an_unticked_null_into_the_typed_text_without_quotes(signed_in, cap):
    _, hold = factories.held_hold(cap, typed_body())
    for typed in ("now a string", '"quoted"', "12", "{"):
        data = {**unchanged(), "item-0-action": "edit", "item-0-f-4-null": "", "item-0-f-4": typed}
        look = review_post(signed_in, hold, data)
        assert json.loads(confirmed(look))["items"][0]["data"]["note"] == typed


def test_it_requires_an_action_for_every_item_and_a_comment_for_feedback(signed_in, cap):
    _, hold = factories.held_hold(cap)
    response = review_post(signed_in, hold, {"item-0-action": "feedback"})
    assert response.status_code == 422
    text = response.content.decode()
    assert "Feedback needs a comment." in text and "Choose an action for this item." in text
    ok = review_post(signed_in, hold, {"item-0-action": "feedback", "item-1-action": "reject", "comment": "why?"})
    assert ok.status_code == 200 and "copied to 2 items" in ok.content.decode()


def test_it_refuses_an_action_the_hold_does_not_offer(signed_in, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(actions=["approve", "reject"]))
    response = review_post(signed_in, hold, {"item-0-action": "edit", "item-1-action": "approve"})
    assert response.status_code == 422 and "This item does not offer that action." in response.content.decode()


def test_it_approves_all_with_one_button(signed_in, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=3))
    look = review_post(signed_in, hold, {"approve_all": "1"})
    assert look.status_code == 200
    assert [i["action"] for i in json.loads(confirmed(look))["items"]] == ["approve"] * 3


def test_it_answers_htmx_with_fragments_and_retargets_errors(signed_in, cap):
    _, hold = factories.held_hold(cap)
    look = review_post(signed_in, hold, {"approve_all": "1"}, **{"HX-Request": "true"})
    assert look.status_code == 200 and "<html" not in look.content.decode()
    assert look.content.decode().lstrip().startswith('<div class="last-look">')
    bad = review_post(signed_in, hold, {"item-0-action": "approve"}, **{"HX-Request": "true"})
    assert bad.status_code == 422 and bad["HX-Retarget"] == "#decision-form" and bad["HX-Reswap"] == "outerHTML"
    assert bad.content.decode().lstrip().startswith('<form id="decision-form"')


def test_it_refuses_a_second_decision_with_409_and_says_who_decided(signed_in, cap, admin_user, client):
    _, hold = factories.held_hold(cap)
    look = review_post(signed_in, hold, {"approve_all": "1"})
    decision = {"decision": confirmed(look), "fingerprint": hold.fingerprint}
    assert signed_in.post(url(hold, "/decision"), decision).status_code == 303
    replay = signed_in.post(url(hold, "/decision"), decision)
    assert replay.status_code == 409 and "You decided" in replay.content.decode()
    client.force_login(admin_user)
    other = client.post(url(hold, "/decision"), decision)
    assert other.status_code == 409
    assert (
        "Already decided" in other.content.decode() and "was decided by <strong>mona</strong>" in other.content.decode()
    )
    assert client.post(url(hold, "/review"), {"approve_all": "1", "fingerprint": hold.fingerprint}).status_code == 409
    assert Invocation.objects.filter(hold=hold, kind="resume").count() == 1
    assert AuditEvent.objects.filter(kind="hold.decided", hold_id_ref=hold.pk).count() == 1


def test_it_refuses_a_decision_after_expiry_with_409_even_before_the_sweep(signed_in, cap):
    _, hold = factories.held_hold(cap)
    look = review_post(signed_in, hold, {"approve_all": "1"})
    factories.past_due(hold.pk)
    response = signed_in.post(url(hold, "/decision"), {"decision": confirmed(look), "fingerprint": hold.fingerprint})
    assert response.status_code == 409 and "This hold expired" in response.content.decode()
    assert not Invocation.objects.filter(hold=hold, kind="resume").exists()
    page = signed_in.get(url(hold)).content.decode()
    assert "This hold has expired." in page and 'id="decision-form" class="decision readonly"' in page


def test_it_refuses_a_decision_on_a_changed_hold_with_409(signed_in, cap):
    _, hold = factories.held_hold(cap)
    look = review_post(signed_in, hold, {"approve_all": "1"})
    response = signed_in.post(url(hold, "/decision"), {"decision": confirmed(look), "fingerprint": "0" * 64})
    assert response.status_code == 409 and "This hold changed" in response.content.decode()
    assert review_post(signed_in, hold, {"approve_all": "1", "fingerprint": "f" * 64}).status_code == 409
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_refuses_a_tampered_decision_with_422(signed_in, cap):
    _, hold = factories.held_hold(cap)
    body = {"items": [{"id": "INV-1", "action": "approve"}], "comment": None}
    response = signed_in.post(url(hold, "/decision"), {"decision": json.dumps(body), "fingerprint": hold.fingerprint})
    assert response.status_code == 422 and "has no action" in response.content.decode()
    bad_json = signed_in.post(url(hold, "/decision"), {"decision": "{", "fingerprint": hold.fingerprint})
    assert bad_json.status_code == 422
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_shows_a_viewer_the_hold_read_only_and_answers_their_posts_with_403(client, cap, viewer):
    _, hold = factories.held_hold(cap)
    client.force_login(viewer)
    page = client.get(url(hold)).content.decode()
    assert "Read-only." in page and 'type="radio"' not in page and "Submit decision" not in page
    assert client.post(url(hold, "/review"), {"approve_all": "1", "fingerprint": hold.fingerprint}).status_code == 403
    body = json.dumps({"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]})
    assert client.post(url(hold, "/decision"), {"decision": body, "fingerprint": hold.fingerprint}).status_code == 403
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_needs_csrf_to_decide(cap, member):
    from django.test import Client

    _, hold = factories.held_hold(cap)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    body = json.dumps({"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]})
    assert client.post(url(hold, "/decision"), {"decision": body, "fingerprint": hold.fingerprint}).status_code == 403
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_it_shows_files_and_serves_them_to_reviewers_only(client, signed_in, cap):
    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    png = factories.run_file(run, name="scan.png", content=b"\x89PNG", content_type="image/png")
    page_html = factories.run_file(
        run, name="page.html", content=b"<script>alert(1)</script>", content_type="text/html"
    )
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body(files=[png.public_id, page_html.public_id]))
    body = signed_in.get(url(hold)).content.decode()
    assert f'href="/files/{png.public_id}"' in body and "image/png" in body and "scan.png" in body
    inline = signed_in.get(f"/files/{png.public_id}")
    assert inline.status_code == 200 and inline["Content-Type"] == "image/png"
    assert "attachment" not in inline.get("Content-Disposition", "")
    download = signed_in.get(f"/files/{page_html.public_id}")
    assert download["Content-Type"] == "application/octet-stream" and "attachment" in download["Content-Disposition"]
    client.logout()
    assert client.get(f"/files/{png.public_id}").status_code == 302


def test_it_escapes_agent_text_and_leaves_no_hx_attribute_from_it(signed_in, cap):
    evil = '<img src=x onerror=alert(1)> <a hx-get="/logout/" hx-trigger="load">x</a> {{ request }}'
    items = [{"id": evil, "title": evil, "data": {evil: evil}}]
    _, hold = factories.held_hold(cap, factories.ask_body(intent=evil[:500], items=items, details=evil))
    for response in (signed_in.get(url(hold)), signed_in.get("/"), review_post(signed_in, hold, {"approve_all": "1"})):
        text = response.content.decode()
        elements = parsed(text)
        assert not [tag for tag, _ in elements if tag == "img"]
        attributes = [(name, value) for _, attrs in elements for name, value in attrs]
        assert ("hx-trigger", "load") not in attributes and ("hx-get", "/logout/") not in attributes
        assert not [name for name, _ in attributes if name.startswith("on")]
        assert "&lt;img src=x onerror=alert(1)&gt;" in text and "{{ request }}" in text


def parsed(text: str) -> list[tuple[str, list]]:
    """Every element of a page with its attributes, as a browser's parser sees them."""
    from html.parser import HTMLParser

    found = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Collect().feed(text)
    return found


@pytest.mark.parametrize(
    "details",
    [
        "[" * 12_000,  # Python-Markdown is quadratic on runs of brackets (21.8 s per view before)
        "".join("    " * depth + "- level\n" for depth in range(300)),  # 180 KB: RecursionError in process
    ],
    ids=["brackets", "nesting"],
)
def test_details_over_the_rendering_budget_show_as_plain_text_and_the_hold_stays_decidable(
    signed_in, cap, details, monkeypatch
):
    run, hold = factories.held_hold(cap, factories.ask_body(details=details))
    assert hold.details_html is None
    # Rendered once, at the ask: a page view never runs markdown.
    monkeypatch.setattr("holds.markup.to_html", lambda text: pytest.fail("markdown ran on a page view"))
    page = signed_in.get(url(hold))
    text = page.content.decode()
    assert page.status_code == 200 and "Shown as plain text" in text
    assert html.escape(details[:200]) in text or details[:200] in text
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    confirmed = signed_in.post(url(hold, "/decision"), {"decision": json.dumps(body), "fingerprint": hold.fingerprint})
    assert confirmed.status_code == 303
    assert Hold.objects.get(pk=hold.pk).status == "decided"


def test_details_are_rendered_once_at_the_ask_and_stored_sanitised(signed_in, cap, monkeypatch):
    run, hold = factories.held_hold(cap, factories.ask_body(details="**edit** it <script>x</script>"))
    assert hold.details_html.startswith("<p><strong>edit</strong> it &lt;script&gt;")
    monkeypatch.setattr("holds.markup.to_html", lambda text: pytest.fail("markdown ran on a page view"))
    assert "<strong>edit</strong>" in signed_in.get(url(hold)).content.decode()


# --- per-item actions, details and schema ---------------------------------------------------------


def parts_body():
    data = {"payee": "Acme", "amount": "120.00"}
    schema = {"type": "object", "properties": {"amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"}}}
    return factories.ask_body(
        actions=["approve", "edit", "reject"],
        items=[
            {"id": "A", "title": "Only edit", "data": data, "actions": ["edit", "reject"], "schema": schema},
            {
                "id": "B",
                "title": "Approve or reject",
                "data": data,
                "actions": ["approve", "reject"],
                "details": "Paid **twice** last week",
            },
        ],
    )


def test_it_shows_each_items_own_actions_and_details(signed_in, cap):
    _, hold = factories.held_hold(cap, parts_body())
    page = signed_in.get(url(hold)).content.decode()
    radios = set(re.findall(r'name="(item-\d)-action" value="(\w+)"', page))
    assert radios == {("item-0", "edit"), ("item-0", "reject"), ("item-1", "approve"), ("item-1", "reject")}
    assert "<strong>twice</strong>" in page
    assert 'id="item-0-edit"' in page and 'id="item-1-edit"' not in page
    assert "Approve all that allow it" in page


def test_it_puts_a_schema_error_at_the_field_and_keeps_the_input(signed_in, cap):
    _, hold = factories.held_hold(cap, parts_body())
    data = {"item-0-action": "edit", "item-0-f-0": "Acme", "item-0-f-1": "12,5", "item-1-action": "approve"}
    response = review_post(signed_in, hold, data)
    assert response.status_code == 422
    text = response.content.decode()
    assert 'id="item-0-f-1-error">&quot;12,5&quot; is not in the expected format (pattern ^[0-9]+\\.[0-9]{2}$)' in text
    assert 'value="12,5"' in text
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def schema_body(required=("zip", "seats")):
    schema = {
        "type": "object",
        "properties": {
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            "seats": {"type": "integer", "minimum": 1},
            "currency": {"enum": ["EUR", "USD", "GBP"]},
            "rate": {"type": "number"},
        },
        "required": list(required),
    }
    data = {"zip": "10115", "seats": 20, "currency": "EUR", "rate": 1.5}
    return factories.ask_body(items=[{"id": "S", "title": "Seats", "data": data, "schema": schema}])


def schema_edit(**typed) -> dict:
    """An edit of schema_body's item: its four inputs as the page fills them, some retyped."""
    fields = {"zip": "10115", "seats": "20", "currency": '"EUR"', "rate": "1.5", **typed}
    return {"item-0-action": "edit", **{f"item-0-f-{n}": fields[k] for n, k in enumerate(fields)}}


def test_it_says_schema_errors_in_plain_words_and_the_summary_links_to_each_field(signed_in, cap):
    _, hold = factories.held_hold(cap, schema_body(required=("zip", "seats", "ref")))
    response = review_post(signed_in, hold, schema_edit(zip="ABCDE", seats="0"))
    assert response.status_code == 422
    text = html.unescape(response.content.decode())
    assert 'id="item-0-f-0-error">"ABCDE" is not in the expected format (pattern ^[0-9]{5}$)' in text
    assert 'id="item-0-f-1-error">must be at least 1' in text
    assert "ref: is required" in text  # required by the schema, not asked: no input to put it at
    assert "does not match" not in text and "is a required property" not in text
    summary = text[text.index('id="form-errors"') : text.index("</ul>", text.index('id="form-errors"'))]
    for anchor in ("item-0-f-0", "item-0-f-1", "item-0-approve"):
        assert f'<a href="#{anchor}">' in summary, summary
        assert f'id="{anchor}"' in text
    assert 'field-key">zip</span>: "ABCDE" is not in the expected format' in summary


def test_the_api_says_schema_errors_in_the_same_plain_words(api, cap, member_key):
    _, hold = factories.held_hold(cap, schema_body(required=("zip", "seats", "ref")))
    body = {"items": [{"id": "S", "action": "edit", "data": {"zip": "1", "seats": 3.7, "currency": "JPY"}}]}
    response = api.post(f"/v0/holds/{hold.public_id}/decision", body, key=member_key)
    assert response.status_code == 422
    errors = {e["field"]: e["message"] for e in response.json()["errors"]}
    assert errors["items[0].data.seats"] == "must be a whole number"
    assert errors["items[0].data.currency"] == 'must be one of: "EUR", "USD", "GBP"'
    assert errors["items[0].data.ref"] == "is required"


def test_an_enum_field_is_a_select_of_its_options(signed_in, cap):
    _, hold = factories.held_hold(cap, schema_body())
    page = signed_in.get(url(hold)).content.decode()
    select = page[
        page.index('<select id="item-0-f-2"') : page.index("</select>", page.index('<select id="item-0-f-2"'))
    ]
    assert [html.unescape(v) for v in re.findall(r'<option value="([^"]*)"', select)] == [
        '"EUR"',
        '"USD"',
        '"GBP"',
    ]
    assert "selected>EUR</option>" in select
    look = review_post(signed_in, hold, {**schema_edit(currency='"GBP"'), "item-0-f-0": "10117"})
    assert json.loads(confirmed(look))["items"][0]["data"]["currency"] == "GBP"
    refused = review_post(signed_in, hold, schema_edit(currency='"JPY"'))
    assert refused.status_code == 422 and 'id="item-0-f-2-error">Choose one of the options.' in refused.content.decode()


def test_a_schema_integer_refuses_3_7_and_a_whole_number_stays_whole(signed_in, cap):
    _, hold = factories.held_hold(cap, schema_body())
    page = signed_in.get(url(hold)).content.decode()
    assert re.search(r'id="item-0-f-1"[^>]*step="1"', page)
    refused = review_post(signed_in, hold, schema_edit(seats="3.7"))
    assert refused.status_code == 422
    assert 'id="item-0-f-1-error">Enter a whole number, such as 21.' in refused.content.decode()
    # Neither an integer nor a number field turns 21 into 21.0.
    look = review_post(signed_in, hold, schema_edit(seats="21", rate="21"))
    assert look.status_code == 200, look.content.decode()
    sent = confirmed(look)
    assert '"seats": 21,' in sent and '"rate": 21}' in sent, sent
    _, plain = factories.held_hold(cap, typed_body())
    look = review_post(signed_in, plain, {**unchanged(), "item-0-action": "edit", "item-0-f-2": "21"})
    assert type(json.loads(confirmed(look))["items"][0]["data"]["rate"]) is int


def test_a_comment_has_a_limit_that_the_page_counts_and_the_server_enforces(signed_in, cap):
    from holds.schemas import COMMENT_MAX_CHARS

    _, hold = factories.held_hold(cap)
    page = signed_in.get(url(hold)).content.decode()
    assert f'id="comment-count" data-max="{COMMENT_MAX_CHARS}"' in page
    actions = {"item-0-action": "reject", "item-1-action": "reject"}
    # Line breaks count once, as typed (the browser posts CRLF).
    fits = review_post(signed_in, hold, {**actions, "comment": "x\r\n" * (COMMENT_MAX_CHARS // 2)})
    assert fits.status_code == 200, fits.content.decode()[:500]
    long = "é" * (COMMENT_MAX_CHARS + 1)
    refused = review_post(signed_in, hold, {**actions, "comment": long})
    assert refused.status_code == 422
    limit = f"A comment is limited to {COMMENT_MAX_CHARS} characters; this one has {COMMENT_MAX_CHARS + 1}."
    assert limit in refused.content.decode()
    decision = json.dumps(
        {"items": [{"id": "INV-1", "action": "reject"}, {"id": "INV-2", "action": "reject"}], "comment": long}
    )
    sent = signed_in.post(url(hold, "/decision"), {"decision": decision, "fingerprint": hold.fingerprint})
    assert sent.status_code == 422 and "at most 4000 characters" in sent.content.decode()
    assert Hold.objects.get(pk=hold.pk).status == "pending"


def test_asked_ago_is_kept_current_and_the_favicon_is_served(signed_in, client, cap):
    _, hold = factories.held_hold(cap)
    page = signed_in.get(url(hold)).content.decode()
    assert f'data-age="{hold.created_at.isoformat()}"' in page
    assert '<link rel="icon" href="/static/favicon.ico"' in page
    icon = client.get("/favicon.ico")  # signed out too: browsers ask for it on any page
    assert icon.status_code == 200 and icon["Content-Type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"


def test_approve_all_touches_only_the_items_that_offer_approve(signed_in, cap):
    _, hold = factories.held_hold(cap, parts_body())
    response = review_post(signed_in, hold, {"approve_all": "1", "item-0-action": "reject"})
    assert response.status_code == 200, response.content.decode()
    assert json.loads(confirmed(response))["items"] == [
        {"id": "A", "action": "reject"},
        {"id": "B", "action": "approve"},
    ]
    response = review_post(signed_in, hold, {"approve_all": "1"})
    assert response.status_code == 422 and "Choose an action for this item." in response.content.decode()


def test_an_integer_field_takes_any_number(signed_in, cap):
    _, hold = factories.held_hold(cap, typed_body())
    response = review_post(signed_in, hold, {**unchanged(), "item-0-action": "edit", "item-0-f-1": "12.5"})
    assert response.status_code == 200, response.content.decode()
    assert json.loads(confirmed(response))["items"][0]["data"]["amount"] == 12.5


def test_a_schemas_property_type_picks_the_input_for_a_key_asked_as_null(signed_in, cap):
    schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 1}}}
    body = factories.ask_body(items=[{"id": "Q", "title": "Age?", "data": {"age": None}, "schema": schema}])
    _, hold = factories.held_hold(cap, body)
    page = signed_in.get(url(hold)).content.decode()
    assert 'type="number" id="item-0-f-0"' in page
    response = review_post(signed_in, hold, {"item-0-action": "edit", "item-0-f-0": "30"})
    assert response.status_code == 200, response.content.decode()
    assert json.loads(confirmed(response))["items"][0]["data"] == {"age": 30}
    response = review_post(signed_in, hold, {"item-0-action": "edit", "item-0-f-0": "0"})
    assert response.status_code == 422
    assert 'id="item-0-f-0-error">must be at least 1' in response.content.decode()


def test_a_refused_page_and_a_missing_one_are_styled_pages_that_say_why(client, viewer, settings):
    settings.DEBUG = False
    client.force_login(viewer)
    forbidden = client.get("/audit")
    assert forbidden.status_code == 403
    assert (
        "You may not do this" in forbidden.content.decode()
        and "only admins read the audit log" in forbidden.content.decode()
    )
    assert 'href="/"' in forbidden.content.decode()  # base.html's navigation
    missing = client.get("/holds/ho_missing")
    assert missing.status_code == 404 and "Not found" in missing.content.decode()
    assert "<code>/holds/ho_missing</code>" in missing.content.decode()


def test_after_a_decision_it_opens_the_next_hold_unless_asked_to_stay(signed_in, cap):
    _, first = factories.held_hold(cap, factories.ask_body(intent="First", expires_in=3600))
    _, second = factories.held_hold(cap, factories.ask_body(intent="Second", expires_in=7200))
    look = signed_in.post(url(first, "/review"), {"approve_all": "1", "fingerprint": first.fingerprint})
    assert 'id="go-next" checked' in look.content.decode()  # on by default
    decision = {"decision": confirmed(look), "fingerprint": first.fingerprint, "next": "1"}
    response = signed_in.post(url(first, "/decision"), decision)
    assert response.status_code == 303 and response["Location"] == url(second)

    look = signed_in.post(url(second, "/review"), {"approve_all": "1", "fingerprint": second.fingerprint})
    response = signed_in.post(
        url(second, "/decision"), {"decision": confirmed(look), "fingerprint": second.fingerprint}
    )
    assert response["Location"] == url(second)  # stayed: "next" unticked
    _, third = factories.held_hold(cap, factories.ask_body(intent="Third"))
    look = signed_in.post(url(third, "/review"), {"approve_all": "1", "fingerprint": third.fingerprint})
    assert 'id="go-next">' in look.content.decode()  # the choice is kept (a cookie)
