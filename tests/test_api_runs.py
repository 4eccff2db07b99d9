"""POST /v0/runs and GET /v0/runs/{id}: starting runs, idempotency, child runs, reading."""

import pytest

from holds.models import AuditEvent, Invocation, Run
from holds.services import ports
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema_cap(db):
    return factories.capability(
        name="extract",
        input_schema={
            "type": "object",
            "required": ["doc"],
            "properties": {"doc": {"type": "string"}, "pages": {"type": "integer", "minimum": 1}},
            "additionalProperties": False,
        },
    )


def test_it_starts_a_run_with_its_start_invocation(api, cap, member_key):
    response = api.post("/v0/runs", {"capability": "pay_invoices", "input": {"a": 1}}, key=member_key)
    assert response.status_code == 201
    run = Run.objects.get(pk=int(response.json()["run_id"][2:]))
    assert response.json()["status"] == "running" and run.input == {"a": 1}
    invocation = Invocation.objects.get(run=run)
    assert (invocation.kind, invocation.seq, invocation.status) == ("start", 1, "pending")
    assert run.started_by_account.name == "robot" and run.version == cap.version and run.endpoint == cap.endpoint
    assert AuditEvent.objects.filter(kind="run.started", run_id_ref=run.pk).exists()


def test_it_publishes_the_start_after_commit(api, cap, member_key, django_capture_on_commit_callbacks, monkeypatch):
    published = []
    monkeypatch.setitem(ports._handlers, "publish", published.extend)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run_id = api.post("/v0/runs", {"capability": "pay_invoices"}, key=member_key).json()["run_id"]
    assert len(callbacks) == 1
    assert published == [Invocation.objects.get(run_id=int(run_id[2:])).id]


def test_it_checks_input_against_the_schema_naming_paths(api, schema_cap, member_key):
    response = api.post("/v0/runs", {"capability": "extract", "input": {"pages": 0, "x": 1}}, key=member_key)
    assert response.status_code == 422
    fields = {e["field"] for e in response.json()["errors"]}
    assert {"input", "input.pages"} <= fields, fields
    assert not Run.objects.exists()


def test_it_refuses_unknown_capabilities_and_fields(api, cap, member_key):
    response = api.post("/v0/runs", {"capability": "nope", "extra": 1}, key=member_key)
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {"extra"}
    response = api.post("/v0/runs", {"capability": "nope"}, key=member_key)
    assert response.json()["errors"][0]["field"] == "capability"


def test_the_same_idempotency_key_returns_the_same_run(api, cap, member_key):
    body = {"capability": "pay_invoices", "input": {"b": [1, 2], "a": 1}}
    first = api.post("/v0/runs", body, key=member_key, headers={"Idempotency-Key": "k1"})
    reordered = {"capability": "pay_invoices", "input": {"a": 1, "b": [1, 2]}}
    second = api.post("/v0/runs", reordered, key=member_key, headers={"Idempotency-Key": "k1"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["run_id"] == second.json()["run_id"]
    assert Run.objects.count() == 1 and Invocation.objects.count() == 1


def test_the_same_key_with_another_body_is_a_mismatch(api, cap, member_key):
    api.post(
        "/v0/runs", {"capability": "pay_invoices", "input": {"a": 1}}, key=member_key, headers={"Idempotency-Key": "k1"}
    )
    response = api.post(
        "/v0/runs", {"capability": "pay_invoices", "input": {"a": 2}}, key=member_key, headers={"Idempotency-Key": "k1"}
    )
    assert response.status_code == 422 and response.json()["error"] == "idempotency_mismatch"


def test_keys_belong_to_their_caller(api, cap, member_key, admin_key):
    body = {"capability": "pay_invoices"}
    a = api.post("/v0/runs", body, key=member_key, headers={"Idempotency-Key": "same"}).json()["run_id"]
    b = api.post("/v0/runs", body, key=admin_key, headers={"Idempotency-Key": "same"}).json()["run_id"]
    assert a != b


def test_a_run_token_starts_a_child_run(api, cap):
    parent = factories.start_run(cap)
    _, token = factories.deliver_now(parent)
    response = api.post("/v0/runs", {"capability": "pay_invoices", "input": {}}, token=token)
    assert response.status_code == 201
    child = Run.objects.get(pk=int(response.json()["run_id"][2:]))
    assert child.parent == parent
    read = api.get(f"/v0/runs/{parent.public_id}", token=token).json()
    assert read["children"] == [child.public_id]


def test_a_signed_in_person_starts_a_run_with_csrf(client, cap, member):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(member)
    refused = strict.post("/v0/runs", {"capability": "pay_invoices"}, content_type="application/json")
    assert refused.status_code == 403
    strict.get("/login/")  # sets the CSRF cookie
    token = strict.cookies["csrftoken"].value
    ok = strict.post(
        "/v0/runs", {"capability": "pay_invoices"}, content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert ok.status_code == 201
    assert Run.objects.get().started_by_user == member


def test_viewers_may_not_start_runs(api, cap, db):
    key = factories.account("eyes", role="viewer")[1]
    assert api.post("/v0/runs", {"capability": "pay_invoices"}, key=key).status_code == 403


def test_it_reads_a_run(api, cap, member_key):
    run, hold = factories.held_hold(cap)
    read = api.get(f"/v0/runs/{run.public_id}", key=member_key).json()
    assert read == {
        "run_id": run.public_id,
        "capability": "pay_invoices",
        "version": "1",
        "status": "held",
        "seq": 1,
        "input": {},
        "output": None,
        "error": None,
        "parent": None,
        "children": [],
        "holds": [{"hold_id": hold.public_id, "status": "pending"}],
        "created_at": read["created_at"],
    }


def test_a_token_reads_only_its_own_run(api, cap):
    mine, other = factories.start_run(cap), factories.start_run(cap)
    _, token = factories.deliver_now(mine)
    assert api.get(f"/v0/runs/{mine.public_id}", token=token).status_code == 200
    assert api.get(f"/v0/runs/{other.public_id}", token=token).status_code == 404


def test_an_admin_fails_a_run_and_its_hold_is_cancelled(api, cap, admin_key, member_key):
    run, hold = factories.held_hold(cap)
    assert api.post(f"/v0/runs/{run.public_id}/fail", {}, key=member_key).status_code == 403
    response = api.post(f"/v0/runs/{run.public_id}/fail", {"reason": "wrong vendor"}, key=admin_key)
    assert response.status_code == 200 and response.json()["status"] == "failed"
    hold.refresh_from_db()
    assert hold.status == "cancelled"
    assert api.post(f"/v0/runs/{run.public_id}/fail", {}, key=admin_key).status_code == 409
