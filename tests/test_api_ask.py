"""POST /v0/holds: the agent asks. Every SPEC rule, with every bad field named by path."""

import json

import pytest

from holds.models import AuditEvent, Hold, HoldItem
from tests import factories

pytestmark = pytest.mark.django_db


def test_it_creates_a_pending_hold_with_its_items(api, live):
    run, invocation, token = live
    response = api.post("/v0/holds", factories.ask_body(3), token=token)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "pending" and body["hold_id"].startswith("h_")
    hold = Hold.objects.get(pk=int(body["hold_id"][2:]))
    assert hold.run == run and hold.invocation == invocation and hold.item_count == 3
    assert hold.min_confidence == 0.68
    assert list(HoldItem.objects.filter(hold=hold).values_list("item_id", flat=True)) == ["INV-1", "INV-2", "INV-3"]
    assert AuditEvent.objects.filter(kind="hold.asked", hold_id_ref=hold.pk).count() == 1


def test_it_defaults_actions_to_approve_and_reject_and_never_expires(api, live):
    body = factories.ask_body()
    del body["actions"], body["expires_in"]
    response = api.post("/v0/holds", body, token=live[2])
    hold = Hold.objects.get(pk=int(response.json()["hold_id"][2:]))
    assert hold.actions == ["approve", "reject"] and hold.expires_at is None


def test_it_names_every_bad_field_by_path(api, live):
    body = {
        "intent": "",
        "actions": ["approve", "approve", "delete"],
        "items": [
            {"id": "A", "title": "t", "data": {"amount": 1}, "confidence": {"amount": 1.5, "payee": 0.2}},
            {"id": "A", "title": "", "data": [], "extra": 1},
            {"id": 7, "title": "t", "data": {}, "confidence": {"x": True}},
        ],
        "expires_in": 59,
        "files": ["nope"],
        "surprise": True,
    }
    response = api.post("/v0/holds", body, token=live[2])
    assert response.status_code == 422
    assert response.json()["error"] == "invalid"
    fields = {e["field"] for e in response.json()["errors"]}
    assert {
        "intent",
        "actions[1]",
        "actions[2]",
        "items[0].confidence.amount",
        "items[0].confidence.payee",
        "items[1].id",
        "items[1].title",
        "items[1].data",
        "items[1].extra",
        "items[2].id",
        "items[2].confidence.x",
        "expires_in",
        "files[0]",
        "surprise",
    } <= fields, fields
    assert all(e["message"] for e in response.json()["errors"])
    assert Hold.objects.count() == 0


@pytest.mark.parametrize(
    "patch, field",
    [
        ({"items": []}, "items"),
        ({"items": [factories.ask_body(1)["items"][0]] * 101}, "items"),
        ({"expires_in": 2_592_001}, "expires_in"),
        ({"expires_in": 3600.5}, "expires_in"),
        ({"expires_in": True}, "expires_in"),
        ({"intent": "x" * 501}, "intent"),
        ({"actions": []}, "actions"),
        ({"details": 5}, "details"),
        ({"files": ["f_1"] * 21}, "files"),
    ],
)
def test_it_refuses_each_rule(api, live, patch, field):
    response = api.post("/v0/holds", factories.ask_body(**patch), token=live[2])
    assert response.status_code == 422
    assert field in {e["field"] for e in response.json()["errors"]}


def test_it_accepts_the_edges(api, live):
    body = factories.ask_body(100, expires_in=60)
    body["items"][0]["confidence"] = {"amount": 0, "payee": 1}
    assert api.post("/v0/holds", body, token=live[2]).status_code == 201


def test_it_refuses_a_second_open_hold_with_its_id(api, live):
    first = api.post("/v0/holds", factories.ask_body(), token=live[2]).json()["hold_id"]
    response = api.post("/v0/holds", {"intent": ""}, token=live[2])
    assert response.status_code == 409  # 409 comes before 422
    assert response.json() == {"error": "hold_open", "message": response.json()["message"], "hold_id": first}


def test_it_answers_400_for_bad_json_and_for_nan(api, live):
    assert api.post("/v0/holds", raw="{nope", token=live[2]).json()["error"] == "bad_json"
    nan = '{"intent": "x", "items": [{"id": "a", "title": "t", "data": {"v": NaN}}]}'
    assert api.post("/v0/holds", raw=nan, token=live[2]).status_code == 400


def test_it_refuses_a_body_over_one_mebibyte_before_parsing(api, live):
    raw = '{"intent": "' + "x" * (1024 * 1024) + '"'  # also not JSON: size is checked first
    response = api.post("/v0/holds", raw=raw, token=live[2])
    assert response.status_code == 413 and response.json()["error"] == "too_large"


def test_it_refuses_a_chunked_body_over_one_mebibyte(client, live):
    import io

    raw = b"[" + b"1," * (600 * 1024) + b"1]"
    response = client.generic(
        "POST",
        "/v0/holds",
        data=b"",
        content_type="application/json",
        headers={"x-agentos-run-token": live[2]},
        **{"wsgi.input": io.BytesIO(raw), "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""},
    )
    assert response.status_code == 413


def test_it_reads_a_chunked_body_under_the_limit(client, live):
    import io

    raw = json.dumps(factories.ask_body()).encode()
    response = client.generic(
        "POST",
        "/v0/holds",
        data=b"",
        content_type="application/json",
        headers={"x-agentos-run-token": live[2]},
        **{"wsgi.input": io.BytesIO(raw), "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""},
    )
    assert response.status_code == 201, response.content


def test_it_checks_the_token_before_the_size(api, live):
    response = api.post("/v0/holds", raw="x" * (1024 * 1024 + 1), token="tok_nope")
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"


@pytest.mark.parametrize("token", [None, "", "tok_unknown", "not-a-token"])
def test_it_refuses_missing_and_unknown_tokens(api, live, token):
    headers = {} if token is None else {"x-agentos-run-token": token}
    response = api.post("/v0/holds", factories.ask_body(), headers=headers)
    assert response.status_code == 401
    assert set(response.json()) == {"error", "message"}


def test_it_refuses_a_token_that_was_never_delivered(api, cap):
    from holds.auth import run_token_for
    from holds.models import Invocation

    run = factories.start_run(cap)
    undelivered = Invocation.objects.get(run=run)
    assert api.post("/v0/holds", factories.ask_body(), token=run_token_for(undelivered.id)).status_code == 401


def test_it_refuses_the_token_of_a_finished_run(api, live):
    run, invocation, token = live
    factories.answer(invocation, {"status": "completed", "output": {}})
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 401


def test_it_refuses_the_token_of_a_held_run(api, live):
    run, invocation, token = live
    hold_id = api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"]
    factories.answer(invocation, {"status": "suspended", "hold_id": hold_id})
    assert api.get(f"/v0/holds/{hold_id}", token=token).status_code == 401


def test_an_ask_with_a_token_that_is_not_live_writes_nothing(api, cap, member_key):
    from django.db.models import Sum

    from holds.auth import run_token_for
    from holds.models import PendingCount

    def written():
        return Hold.objects.count(), AuditEvent.objects.count(), PendingCount.objects.aggregate(n=Sum("delta"))["n"]

    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold_id = api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"]
    factories.answer(invocation, {"status": "suspended", "hold_id": hold_id})
    before = written()
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 401  # held
    decision = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    assert api.post(f"/v0/holds/{hold_id}/decision", decision, key=member_key).status_code == 200
    _, new_token = factories.deliver_now(run)
    after_decision = written()
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 401  # superseded
    forged = run_token_for(invocation.id)[:-4] + "AAAA"  # the right invocation, a MAC that is not ours
    assert api.post("/v0/holds", factories.ask_body(), token=forged).status_code == 401
    assert written() == after_decision and before[0] == after_decision[0]
    assert api.post("/v0/holds", factories.ask_body(), token=new_token).status_code == 201  # the live one


def test_an_ask_refused_by_the_open_hold_index_after_its_token_died_is_a_401_not_a_500(live, monkeypatch):
    from holds import services

    run, invocation, token = live
    assert services.hold_ask_by_token(token=token, body=factories.ask_body()) is not None
    # The second ask's statement hits the one-pending-hold index; by the time the refusal is worked
    # out, the token is no longer live (the run finished in between).
    monkeypatch.setattr(services.asks, "invocation_for_token", lambda token: None)
    assert services.hold_ask_by_token(token=token, body=factories.ask_body()) is None


def test_it_keeps_numbers_exact(api, live):
    raw = (
        '{"intent": "n", "items": [{"id": "a", "title": "t", "data": '
        '{"big": 123456789012345678901234567890, "f": 0.1, "e": 1e300, "i": 3, "x": 2.50}}]}'
    )
    response = api.post("/v0/holds", raw=raw, token=live[2])
    assert response.status_code == 201, response.content
    data = HoldItem.objects.get().data
    assert data == {"big": 123456789012345678901234567890, "f": 0.1, "e": 1e300, "i": 3, "x": 2.5}
    assert isinstance(data["i"], int) and isinstance(data["x"], float)


@pytest.mark.parametrize(
    "number",
    [
        "1e400",
        "-1E+309",
        "1" + "0" * 309 + ".5",  # no exponent: 310 digits before the point
        "2" + "0" * 209 + ".0e99",  # a two-digit exponent on 210 digits
        "1" * 600 + "e-100",  # a negative exponent on more digits than it takes back
    ],
)
def test_it_refuses_numbers_beyond_float64(api, live, number):
    raw = '{"intent": "n", "items": [{"id": "a", "title": "t", "data": {"e": ' + number + "}}]}"
    response = api.post("/v0/holds", raw=raw, token=live[2])
    assert response.status_code == 400 and response.json()["error"] == "bad_json"


def test_numbers_just_inside_float64_are_kept(api, live):
    # parse_json checks each number only where one might overflow: both sides of that shortcut.
    numbers = {"two_digit_exponent": "9" * 209 + ".9e99", "largest": "1.7976931348623157e308", "small": "1e-400"}
    data = ", ".join(f'"{k}": {v}' for k, v in numbers.items())
    raw = '{"intent": "n", "items": [{"id": "a", "title": "t", "data": {' + data + "}}]}"
    response = api.post("/v0/holds", raw=raw, token=live[2])
    assert response.status_code == 201, response.content
    data = HoldItem.objects.get().data
    assert data == {k: float(v) for k, v in numbers.items()}


def test_an_invocation_asks_at_most_one_hold_even_after_its_first_was_decided(api, live, member_key):
    # Its second hold's resume would take the first one's seq: the sweep and every decision of it
    # would fail on UNIQUE(run, seq) (issue 21). So the second ask is a 409 naming the first hold.
    first = api.post("/v0/holds", factories.ask_body(1), token=live[2]).json()["hold_id"]
    body = {"items": [{"id": "INV-1", "action": "approve"}]}
    assert api.post(f"/v0/holds/{first}/decision", body, key=member_key).status_code == 200
    for second in (factories.ask_body(1), {"intent": ""}):
        response = api.post("/v0/holds", second, token=live[2])
        assert response.status_code == 409
        assert response.json()["error"] == "hold_open" and response.json()["hold_id"] == first
    assert Hold.objects.filter(run=live[0]).count() == 1
