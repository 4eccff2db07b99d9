"""Oversized, chunked, truncated and malformed bodies: 413/400/422 JSON, never a 500, never a partial write."""

import io
import json

import pytest

from holds.models import AuditEvent, Hold, HoldItem, IdempotencyKey, Run, RunFile, RunState
from tests import factories

pytestmark = pytest.mark.django_db
MIB = 1024 * 1024


@pytest.fixture
def live(cap):
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    return run, token


def counts() -> dict:
    return {m.__name__: m.objects.count() for m in (Run, Hold, HoldItem, AuditEvent, RunFile, RunState, IdempotencyKey)}


def send(
    client, path, raw: bytes, *, method="POST", headers=None, chunked=False, length=None, ctype="application/json"
):
    meta = {}
    if chunked:
        meta = {"wsgi.input": io.BytesIO(raw), "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""}
        raw = b""
    elif length is not None:
        meta = {"wsgi.input": io.BytesIO(raw), "CONTENT_LENGTH": str(length)}
        raw = b""
    return client.generic(method, path, data=raw, content_type=ctype, headers=headers or {}, **meta)


def refused(response, status: int, code: str):
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"] == code and body["message"], body


def test_oversized_bodies_get_413_on_every_write_and_write_nothing(client, live, cap, member_key):
    run, token = live
    _, hold = factories.held_hold(cap)
    tok, key = {"x-agentos-run-token": token}, {"authorization": f"Bearer {member_key}"}
    before = counts()
    big = b'{"intent": "' + b"x" * MIB + b'"}'
    for path, method, headers, raw in [
        ("/v0/holds", "POST", tok, big),
        (f"/v0/holds/{hold.public_id}/decision", "POST", key, big),
        ("/v0/runs", "POST", key, big),
        (f"/v0/runs/{run.public_id}/state/k", "PUT", tok, big),
    ]:
        refused(send(client, path, raw, method=method, headers=headers), 413, "too_large")
        refused(send(client, path, raw, method=method, headers=headers, chunked=True), 413, "too_large")
    # A file: 25 MiB is the limit, told by Content-Length before a byte is read.
    files = {**tok, "x-filename": "big.bin"}
    refused(send(client, "/v0/files", b"x", headers=files, length=25 * MIB + 1), 413, "too_large")
    assert counts() == before


def test_a_lying_content_length_is_refused_before_the_body_is_read(client, live):
    _, token = live
    response = send(client, "/v0/holds", b"{}", headers={"x-agentos-run-token": token}, length=MIB + 1)
    refused(response, 413, "too_large")
    response = send(client, "/v0/holds", b"{}", headers={"x-agentos-run-token": token}, length="12abc")
    refused(response, 400, "bad_json")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b'{"intent": "Pay", "items": [',  # truncated mid-body
        b'{"intent": "Pay"',
        json.dumps(factories.ask_body()).encode()[:-7],
        b"\xff\xfe{}",  # not UTF-8
        b'{"intent": "\xc3"}',  # a truncated UTF-8 sequence
        b"\xef\xbb\xbf{}",  # a BOM
        b'{"intent": NaN}',
        b'{"expires_in": Infinity}',
        b'{"x": 1e999}',
        b"{'intent': 'single quotes'}",
        b'{"intent": "a",}',
        b"<xml/>",
        b'{"a": 1} {"b": 2}',
    ],
)
def test_truncated_and_malformed_bodies_get_400_bad_json_and_write_nothing(client, live, raw):
    _, token = live
    before = counts()
    refused(send(client, "/v0/holds", raw, headers={"x-agentos-run-token": token}), 400, "bad_json")
    refused(send(client, "/v0/holds", raw, headers={"x-agentos-run-token": token}, chunked=True), 400, "bad_json")
    assert counts() == before


@pytest.mark.parametrize(
    "body", [[], "x", 1, None, True, {"intent": "x"}, {"items": []}, {"intent": "x", "items": [1]}]
)
def test_json_that_is_not_an_ask_gets_422_with_fields_and_writes_nothing(api, live, body):
    _, token = live
    before = counts()
    response = api.post("/v0/holds", body, token=token)
    refused(response, 422, "invalid")
    assert response.json()["errors"] and all(e["field"] for e in response.json()["errors"])
    assert counts() == before


def test_one_bad_item_among_100_writes_no_hold_and_no_item(api, live):
    _, token = live
    body = factories.ask_body(n_items=100)
    body["items"][99]["confidence"] = {"amount": 2}
    before = counts()
    response = api.post("/v0/holds", body, token=token)
    refused(response, 422, "invalid")
    assert [e["field"] for e in response.json()["errors"]] == ["items[99].confidence.amount"]
    assert counts() == before


def test_malformed_decisions_get_400_or_422_and_leave_the_hold_pending(client, api, cap, member_key):
    _, hold = factories.held_hold(cap)
    url = f"/v0/holds/{hold.public_id}/decision"
    key = {"authorization": f"Bearer {member_key}"}
    refused(send(client, url, b'{"items": [', headers=key), 400, "bad_json")
    refused(send(client, url, b'{"items": [{"id": "INV-1"', headers=key, chunked=True), 400, "bad_json")
    for body in (
        {"items": [{"id": "INV-1", "action": "approve"}]},  # INV-2 has no action
        {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve", "x": 1}]},
        {"items": "all", "comment": 5},
    ):
        refused(api.post(url, body, key=member_key), 422, "invalid")
    hold.refresh_from_db()
    assert hold.status == "pending" and not hold.resumes.exists()


def test_a_chunked_body_just_under_the_limit_is_read_whole(client, live):
    _, token = live
    body = factories.ask_body()
    body["details"] = "d" * (MIB - len(json.dumps(body).encode()) - 10)
    raw = json.dumps(body).encode()
    assert MIB - 100 < len(raw) <= MIB
    response = send(client, "/v0/holds", raw, headers={"x-agentos-run-token": token}, chunked=True)
    assert response.status_code == 201, response.content[:200]


# --- server errors the fuzzer found (fixed): deep nesting, NUL, lone surrogates, long keys, null ---


def test_it_refuses_json_nested_too_deeply_with_400(client, live):
    run, token = live
    before = counts()
    deep = b"[" * 100_000 + b"]" * 100_000  # 200 KB: under the size limit
    refused(send(client, "/v0/holds", deep, headers={"x-agentos-run-token": token}), 400, "bad_json")
    refused(
        send(client, f"/v0/runs/{run.public_id}/state/k", deep, method="PUT", headers={"x-agentos-run-token": token}),
        400,
        "bad_json",
    )
    assert counts() == before


@pytest.mark.parametrize(
    "path, raw",
    [
        ("/v0/holds", b'{"intent": "x", "items": [{"id": "a", "title": "b", "data": {"k": "\\ud800"}}]}'),
        ("/v0/holds", b'{"intent": "x", "items": [{"id": "a", "title": "b", "data": {"\\udfff": 1}}]}'),
        pytest.param("/v0/holds", b'{"intent": "x", "items": [{"id": "a", "title": "b\\u0000", "data": {}}]}'),
        pytest.param(
            "/v0/holds",
            b'{"intent": "x", "items": [{"id": "a", "title": "b", "data": {"k": "\\u0000"}}]}',
        ),
        ("/v0/runs", b'{"capability": "pay_invoices", "input": {"a": "\\ud800"}}'),
        pytest.param("/v0/runs", b'{"capability": "pay\\u0000"}'),
        ("state", b'"\\ud800"'),
    ],
)
def test_it_refuses_nul_and_lone_surrogates_with_400(client, live, member_key, path, raw):
    run, token = live
    before = counts()
    if path == "state":
        response = send(
            client, f"/v0/runs/{run.public_id}/state/k", raw, method="PUT", headers={"x-agentos-run-token": token}
        )
    elif path == "/v0/runs":
        response = send(client, path, raw, headers={"authorization": f"Bearer {member_key}"})
    else:
        response = send(client, path, raw, headers={"x-agentos-run-token": token})
    refused(response, 400, "bad_json")
    assert counts() == before


def test_it_refuses_a_state_key_longer_than_its_column_with_422(api, live):
    run, token = live
    response = api.put(f"/v0/runs/{run.public_id}/state/{'k' * 201}", 1, token=token)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "key"


def test_it_refuses_an_idempotency_key_over_200_characters(api, cap, member_key):
    response = api.post("/v0/runs", {"capability": cap.name}, key=member_key, headers={"Idempotency-Key": "x" * 201})
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "Idempotency-Key"


def test_it_stores_a_null_state_value(client, live):
    run, token = live
    url = f"/v0/runs/{run.public_id}/state/k"
    response = send(client, url, b"null", method="PUT", headers={"x-agentos-run-token": token})
    assert response.status_code == 204, response.content
    assert client.get(url, headers={"x-agentos-run-token": token}).content == b"null"


def test_a_form_body_over_djangos_memory_limit_is_413_not_500(member):
    """A session's POST is CSRF-checked, which reads a form body whole: past 2 MiB Django refuses it."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    client.cookies["csrftoken"] = "a" * 32  # with a cookie, the check goes on to read the form's token
    body = "a=" + "x" * (3 * MIB)
    for path in ("/v0/files", "/v0/runs"):
        response = client.post(path, data=body, content_type="application/x-www-form-urlencoded")
        assert response.status_code == 413 and response.json()["error"] == "too_large", path
