"""Per-item actions, details and schema: asked, read back, and deciding checked against them
(SPEC "Per-item actions, details and schema" and "Settled for this round": Asking)."""

import pytest

from holds import services
from holds.models import Hold, HoldItem, Invocation
from tests import factories

pytestmark = pytest.mark.django_db

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
AMOUNT_SCHEMA = {
    "type": "object",
    "required": ["payee", "amount"],
    "properties": {
        "payee": {"type": "string", "minLength": 1},
        "amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "$defs": {"line": {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}}},
    "additionalProperties": False,
}


@pytest.fixture
def live(cap):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    return run, invocation, token


def item(n=1, **parts):
    return {"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"payee": "Acme", "amount": "120.00"}, **parts}


def ask(api, token, *items, actions=("approve", "edit", "reject")):
    return api.post("/v0/holds", factories.ask_body(items=list(items), actions=list(actions)), token=token)


def held(cap, *items, actions=("approve", "edit", "reject")):
    return factories.held_hold(cap, factories.ask_body(items=list(items), actions=list(actions)))[1]


def decide(api, hold, key, *items):
    return api.post(f"/v0/holds/{hold.public_id}/decision", {"items": list(items)}, key=key)


def fields(response) -> dict:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


# --- asking --------------------------------------------------------------------------------------


def test_it_stores_each_items_actions_details_and_schema_and_reads_them_back(api, live):
    run, _, token = live
    first = item(1, actions=["approve", "reject"], details="Paid **twice** <script>x</script>", schema=AMOUNT_SCHEMA)
    response = ask(api, token, first, item(2))
    assert response.status_code == 201, response.content
    hold_id = response.json()["hold_id"]
    read = api.get(f"/v0/holds/{hold_id}", token=token).json()
    assert read["items"][0] == first
    assert read["items"][1] == item(2)  # an item without its own parts reads as asked: no such keys
    stored = HoldItem.objects.get(item_id="INV-1")
    assert "<strong>twice</strong>" in stored.details_html and "<script>" not in stored.details_html
    assert HoldItem.objects.get(item_id="INV-2").details_html is None


def test_it_refuses_bad_item_parts_naming_each_field(api, live):
    token = live[2]
    bad = [
        item(1, actions=["approve", "approve"]),
        item(2, actions=[]),
        item(3, schema={"type": "strin"}),
        item(4, schema={"$ref": "https://example.com/invoice.json"}),
        item(5, schema={"$schema": "https://json-schema.org/draft/2019-09/schema"}),
        item(6, schema={"type": "string", "pattern": "^(?=a)"}),
        item(7, details="x" * (64 * 1024 + 1)),
        item(8, schema={"enum": ["y" * 1024] * 65}),
        item(9, details=5),
    ]
    response = ask(api, token, *bad)
    assert response.status_code == 422
    errors = fields(response)
    assert set(errors) == {
        "items[0].actions[1]",
        "items[1].actions",
        "items[2].schema",
        "items[3].schema",
        "items[4].schema",
        "items[5].schema",
        "items[6].details",
        "items[7].schema",
        "items[8].details",
    }, errors
    assert "only local references" in errors["items[3].schema"]
    assert "draft 2020-12" in errors["items[4].schema"]
    assert not Hold.objects.exists()


def test_it_checks_a_schema_under_the_draft_it_names(api, live):
    token = live[2]
    # The array form of `items` is draft-07's tuple validation; draft 2020-12 (the default) has prefixItems.
    pair = {"type": "object", "properties": {"pair": {"items": [{"type": "string"}, {"type": "integer"}]}}}
    assert ask(api, token, item(1, schema=pair)).status_code == 422
    response = ask(api, token, item(1, schema={"$schema": DRAFT_07, **pair}))
    assert response.status_code == 201, response.content


def test_it_fingerprints_each_item_whole(cap):
    from holds.services.asks import item_rows

    base = dict(intent="i", actions=["approve"], details="", files=[])

    def fingerprint(*items):
        return services.hold_fingerprint(rows=item_rows(list(items)), **base)

    plain = fingerprint(item(1))
    assert plain == fingerprint(item(1, actions=None, details=None, schema=None))
    others = {
        fingerprint(item(1, actions=["reject"])),
        fingerprint(item(1, details="d")),
        fingerprint(item(1, schema={"type": "object"})),
        fingerprint(item(1, data={"amount": 2})),
        fingerprint(item(1), item(2)),
        services.hold_fingerprint(rows=item_rows([item(1)]), **dict(base, intent="j")),
    }
    assert len(others) == 6 and plain not in others


def test_it_renders_every_items_details_under_the_asks_one_budget(api, live, cap):
    # Five items of 60 KiB each: each is within its own limit, the ask together is past the budget.
    long = "word " * (60 * 1024 // 5)
    response = ask(api, live[2], *[item(n, details=long) for n in range(1, 6)])
    assert response.status_code == 201, response.content
    assert list(HoldItem.objects.values_list("details_html", flat=True)) == [None] * 5
    assert Hold.objects.get().details_html is None
    _, small = factories.held_hold(cap, factories.ask_body(items=[item(1, details="*short*")]))
    assert HoldItem.objects.get(hold=small).details_html == "<p><em>short</em></p>"


# --- deciding ------------------------------------------------------------------------------------


def test_an_items_own_actions_replace_the_holds(api, cap, member_key):
    hold = held(cap, item(1, actions=["approve", "reject"]), item(2, actions=["feedback", "edit"]), actions=["approve"])
    edit = {"id": "INV-1", "action": "edit", "data": {"payee": "B", "amount": "1.00"}}
    response = decide(api, hold, member_key, edit, {"id": "INV-2", "action": "approve"})
    assert response.status_code == 422
    assert set(fields(response)) == {"items[0].action", "items[1].action"}
    edit2 = {"id": "INV-2", "action": "edit", "data": {"payee": "B", "amount": "1.00"}}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "reject"}, edit2)
    assert response.status_code == 200, response.content
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    assert [(i["action"], i["data"]) for i in resume["items"]] == [
        ("reject", {"payee": "Acme", "amount": "120.00"}),
        ("edit", {"payee": "B", "amount": "1.00"}),
    ]


def test_an_edit_keeps_each_keys_json_type_or_is_refused_with_the_hold_pending(api, cap, member_key):
    asked = {"payee": "Acme", "amount": "120.00", "qty": 2, "rate": 0.5, "urgent": False, "note": None, "tags": []}
    hold = held(cap, {"id": "INV-1", "title": "Invoice", "data": asked})
    wrong = {"payee": "Acme", "amount": 120, "qty": "2", "rate": None, "urgent": 0, "note": None, "tags": {}}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "edit", "data": wrong})
    assert response.status_code == 422
    errors = fields(response)
    assert set(errors) == {
        "items[0].data.amount",
        "items[0].data.qty",
        "items[0].data.rate",
        "items[0].data.urgent",
        "items[0].data.tags",
    }
    assert errors["items[0].data.amount"] == "must be a string, as it was asked (got a number)"
    assert errors["items[0].data.rate"] == "may not become null (it was asked as a number)"
    hold.refresh_from_db()
    assert hold.status == Hold.Status.PENDING and not Invocation.objects.filter(hold=hold, kind="resume").exists()
    # Any number fits a number, and a key asked as null takes anything.
    right = {**asked, "qty": 2.5, "rate": 3, "note": {"any": ["thing"]}}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "edit", "data": right})
    assert response.status_code == 200, response.content
    decided = Invocation.objects.get(hold=hold, kind="resume").resume["items"][0]["data"]
    assert decided == right and type(decided["rate"]) is int


def test_with_a_schema_the_schema_alone_decides_an_edit(api, cap, member_key):
    # The asked data does not satisfy the schema, and the schema allows a key that was not asked.
    asked = {"payee": "", "amount": "120"}
    hold = held(cap, {"id": "INV-1", "title": "Invoice", "data": asked, "schema": AMOUNT_SCHEMA})
    wrong = {"payee": "Acme", "amount": 120, "lines": [{"qty": 0}]}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "edit", "data": wrong})
    assert response.status_code == 422
    assert set(fields(response)) == {"items[0].data.amount", "items[0].data.lines[0].qty"}
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.PENDING
    right = {"payee": "Acme", "amount": "120.00", "lines": [{"qty": 3}]}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "edit", "data": right})
    assert response.status_code == 200, response.content
    assert Invocation.objects.get(hold=hold, kind="resume").resume["items"][0]["data"] == right


def test_a_schema_pattern_runs_in_linear_time(api, cap, member_key):
    # ^(a+)+$ backtracks exponentially in Python's re; the edit is answered (refused) at once here.
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    hold = held(cap, {"id": "INV-1", "title": "Invoice", "data": {"code": "aa"}, "schema": schema})
    data = {"code": "a" * 100_000 + "!"}
    response = decide(api, hold, member_key, {"id": "INV-1", "action": "edit", "data": data})
    assert response.status_code == 422 and set(fields(response)) == {"items[0].data.code"}
