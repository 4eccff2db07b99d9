"""Run tokens and service-account keys: never logged, hashed at rest, short-lived, scoped, revocable."""

import hashlib
import logging

import pytest
from django.apps import apps
from django.core import serializers as django_serializers

from holds import delivery, services
from holds.auth import SYSTEM, run_token_for
from holds.logging import JsonFormatter
from holds.models import Invocation, ServiceAccount
from tests import factories
from tests.agent_double import AgentDouble

pytestmark = pytest.mark.django_db
DECIDE = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}


def upload(client, token, name="a.pdf"):
    return client.post(
        "/v0/files",
        data=b"%PDF-1.4 x",
        content_type="application/pdf",
        headers={"x-agentos-run-token": token, "x-filename": name},
    )


def everything_stored() -> str:
    """Every row of every table, as text."""
    rows = []
    for model in apps.get_models():
        rows.append(django_serializers.serialize("json", model.objects.all()))
    return "\n".join(rows)


def test_it_never_logs_a_token_or_a_key(api, client, cap, caplog, capfd, settings):
    account, key = factories.account("logbot", role="admin")
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    tampered = token[:-4] + "AAAA"
    caplog.set_level(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="django.request"):
        api.post("/v0/holds", factories.ask_body(), token=token)
        api.post("/v0/holds", {"intent": ""}, token=token)  # 409 / 422 with the token
        api.post("/v0/holds", factories.ask_body(), token=tampered)  # 401
        api.get("/v0/holds", token=token)
        api.put(f"/v0/runs/{run.public_id}/state/k", {"v": 1}, token=token)
        upload(client, token)
        api.post("/v0/runs", {"capability": cap.name, "input": {}}, key=key)
        api.post("/v0/runs", {"capability": "nope"}, key=key)  # 422
        api.get("/v0/holds/h_999999", key=key)  # 404
        api.post("/v0/holds/h_1/decision", DECIDE, key=key[:-3] + "xyz")  # 401
        api.post("/v0/runs/r_1/fail", {}, token=token)  # 403
        # A delivery that fails carries the token in its body: its log lines must not.
        double = AgentDouble()
        try:
            double.script = [(500, {"echo": token}), (400, {"error": f"bad token {token}"})]
            other = factories.start_run(factories.capability(name="echo", endpoint=double.url))
            other_inv = Invocation.objects.get(run=other)
            delivery.deliver(other_inv.id)
            Invocation.objects.filter(pk=other_inv.id).update(next_attempt_at=None)
            delivery.deliver(other_inv.id)
        finally:
            double.close()
        other_token = run_token_for(other_inv.id)
    formatter = JsonFormatter()
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    out, err = capfd.readouterr()
    assert len(caplog.records) >= 5  # the calls above did log
    for secret in (token, tampered, key, other_token):
        mac = secret.rpartition(".")[2] if secret.startswith("tok_") else secret
        assert mac not in logged and mac not in out and mac not in err, secret[:12]


def test_it_stores_tokens_and_keys_only_as_sha256(api, cap):
    account, key = factories.account("hashbot", role="admin")
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    assert api.post("/v0/holds", factories.ask_body(), token=token).status_code == 201
    assert api.get("/v0/holds", key=key).status_code == 200
    stored = everything_stored()
    assert token not in stored and token.rpartition(".")[2] not in stored
    assert key not in stored and key[10:] not in stored
    assert Invocation.objects.get(pk=invocation.pk).token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert ServiceAccount.objects.get(pk=account.pk).key_hash == hashlib.sha256(key.encode()).hexdigest()


def test_a_token_dies_when_its_run_is_held_and_when_a_resume_supersedes_it(api, cap, member_key):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    hold_id = api.post("/v0/holds", factories.ask_body(), token=token).json()["hold_id"]
    assert api.get(f"/v0/holds/{hold_id}", token=token).status_code == 200
    factories.answer(invocation, {"status": "suspended", "hold_id": hold_id})
    assert api.get(f"/v0/holds/{hold_id}", token=token).status_code == 401  # held: no token lives
    assert api.post(f"/v0/holds/{hold_id}/decision", DECIDE, key=member_key).status_code == 200
    resume, new_token = factories.deliver_now(run)
    assert new_token != token
    assert api.get(f"/v0/holds/{hold_id}", token=new_token).status_code == 200
    response = api.get(f"/v0/holds/{hold_id}", token=token)  # superseded
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"


def test_a_token_dies_when_the_run_finishes(api, cap):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    assert api.get(f"/v0/runs/{run.public_id}", token=token).status_code == 200
    factories.answer(invocation, {"status": "completed", "output": {}})
    assert api.get(f"/v0/runs/{run.public_id}", token=token).status_code == 401
    assert api.put(f"/v0/runs/{run.public_id}/state/k", 1, token=token).status_code == 401


def test_a_token_dies_when_an_admin_fails_its_run(api, cap, admin_key):
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    assert api.post(f"/v0/runs/{run.public_id}/fail", {"reason": "stop"}, key=admin_key).status_code == 200
    assert api.get(f"/v0/runs/{run.public_id}", token=token).status_code == 401


def test_run_as_token_is_refused_on_run_bs_holds_state_and_files(api, client, cap):
    a, b = factories.start_run(cap), factories.start_run(cap)
    _, token_a = factories.deliver_now(a)
    _, token_b = factories.deliver_now(b)
    hold_b = api.post("/v0/holds", factories.ask_body(), token=token_b).json()["hold_id"]
    file_b = upload(client, token_b).json()["file_id"]
    assert api.put(f"/v0/runs/{b.public_id}/state/secret", {"b": 1}, token=token_b).status_code == 204
    refused = [
        api.get(f"/v0/holds/{hold_b}", token=token_a),
        api.get(f"/v0/runs/{b.public_id}", token=token_a),
        api.get(f"/v0/runs/{b.public_id}/state/secret", token=token_a),
        api.put(f"/v0/runs/{b.public_id}/state/secret", {"a": 1}, token=token_a),
        api.delete(f"/v0/runs/{b.public_id}/state/secret", token=token_a),
        api.get(f"/v0/files/{file_b}", token=token_a),
    ]
    assert [r.status_code for r in refused] == [404] * len(refused)
    assert {r.json()["error"] for r in refused} == {"not_found"}
    listed = api.get("/v0/holds", token=token_a).json()["items"]
    assert hold_b not in {h["hold_id"] for h in listed}
    assert api.post(f"/v0/holds/{hold_b}/decision", DECIDE, token=token_b).status_code == 403  # never decides
    assert api.post("/v0/holds", factories.ask_body(files=[file_b]), token=token_a).status_code == 422
    assert api.get(f"/v0/runs/{b.public_id}/state/secret", token=token_b).json() == {"b": 1}


def test_a_revoked_key_is_refused_at_once(api, cap):
    account, key = factories.account("soon-gone", role="admin")
    _, hold = factories.held_hold(cap)
    assert api.get(f"/v0/holds/{hold.public_id}", key=key).status_code == 200
    services.service_account_revoke(account_id=account.pk, actor=SYSTEM.__class__(kind="user", role="admin", label="t"))
    for response in (
        api.get(f"/v0/holds/{hold.public_id}", key=key),
        api.post(f"/v0/holds/{hold.public_id}/decision", DECIDE, key=key),
        api.post("/v0/runs", {"capability": cap.name}, key=key),
    ):
        assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    hold.refresh_from_db()
    assert hold.status == "pending"


@pytest.mark.parametrize(
    "header",
    ["tok_", "tok_inv_x", "tok_inv_x.", "tok_.abc", "Bearer tok_x", "tok_inv_" + "a" * 5000 + ".b", "tok_\u202einv.x"],
)
def test_it_refuses_malformed_tokens_with_401(api, cap, header):
    factories.deliver_now(factories.start_run(cap))
    response = api.get("/v0/holds", token=header)
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"
