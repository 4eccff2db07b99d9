"""Decision receipts through HTTP: a delivered resume carries a JWS that a third party verifies with only the
public JWKS and plain `cryptography` (no joserfc, no database), hashing the asked and decided data itself;
rotation keeps old receipts verifying; a changed byte or an unknown kid fails."""

import base64
import hashlib
import json

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management import call_command
from django.utils import timezone

from holds import delivery
from holds.models import Hold, Invocation
from holds.services import holds_expire_due
from tests import factories

pytestmark = pytest.mark.django_db


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def third_party_verify(token: str, jwks: dict) -> dict:
    """What an auditor does by hand: find the key by kid, check the Ed25519 signature, read the claims."""
    header_b64, payload_b64, signature_b64 = token.split(".")
    header = json.loads(b64url(header_b64))
    assert header["alg"] == "Ed25519" and header["typ"] == "rq-receipt+jws"
    keys = {k["kid"]: k for k in jwks["keys"]}
    if header["kid"] not in keys:
        raise LookupError(f"unknown kid {header['kid']}")
    jwk = keys[header["kid"]]
    assert jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519"
    public = Ed25519PublicKey.from_public_bytes(b64url(jwk["x"]))
    public.verify(b64url(signature_b64), f"{header_b64}.{payload_b64}".encode())  # raises InvalidSignature
    return json.loads(b64url(payload_b64))


def digest(value) -> str:
    """The canonical JSON the receipt hashes: sorted keys, no spaces, UTF-8 as is."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def public_jwks(client) -> dict:
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 200 and response["content-type"] == "application/json"
    return response.json()


def decide(api, hold, body, key):
    response = api.post(f"/v0/holds/{hold.public_id}/decision", body, key=key)
    assert response.status_code == 200, response.content
    return Invocation.objects.get(hold=hold, kind="resume")


EDITED = {"payee": "Aksa Lojistik A.Ş.", "amount": "99.00"}
BODY = {"items": [{"id": "INV-1", "action": "edit", "data": EDITED}, {"id": "INV-2", "action": "reject"}]}


@pytest.mark.django_db(transaction=True)
def test_a_delivered_resume_carries_a_receipt_a_third_party_verifies(agent, acap, member_key, api, client):
    run, hold = factories.held_hold(acap)
    resume = decide(api, hold, BODY, member_key)
    agent.script = [(200, {"status": "completed", "output": {}})]
    assert delivery.deliver(resume.id) == "answered"
    sent = agent.requests[-1]["body"]["resume"]
    claims = third_party_verify(sent["receipt"], public_jwks(client))
    asked = factories.ask_body()["items"]
    hold.refresh_from_db()
    assert claims == {
        "iss": "http://127.0.0.1:8000",
        "hold_id": hold.public_id,
        "run_id": run.public_id,
        "capability": "pay_invoices",
        "resolved_by": "human",
        "decided_by": [{"type": "service_account", "name": "service account robot"}],
        "decided_at": hold.decided_at.isoformat(),
        "iat": int(hold.decided_at.timestamp()),
        "items": [
            {
                "id": "INV-1",
                "action": "edit",
                "asked_sha256": digest(asked[0]["data"]),
                "decided_sha256": digest(EDITED),
            },
            # A reject sends the asked data back: the decided hash is of what the agent received.
            {
                "id": "INV-2",
                "action": "reject",
                "asked_sha256": digest(asked[1]["data"]),
                "decided_sha256": digest(asked[1]["data"]),
            },
        ],
    }
    # The hashes match the data the agent was sent, item by item.
    assert [digest(i["data"]) for i in sent["items"]] == [i["decided_sha256"] for i in claims["items"]]
    # The hold's API shows the same resume, receipt included.
    assert api.get(f"/v0/holds/{hold.public_id}", key=member_key).json()["resume"]["receipt"] == sent["receipt"]


def test_a_person_is_named_as_a_person(api, cap, client, member):
    _, hold = factories.held_hold(cap)
    client.force_login(member)
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    response = client.post(f"/v0/holds/{hold.public_id}/decision", body, content_type="application/json")
    assert response.status_code == 200, response.content
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    claims = third_party_verify(resume["receipt"], public_jwks(client))
    assert claims["decided_by"] == [{"type": "person", "name": member.username}]
    assert [i["asked_sha256"] == i["decided_sha256"] for i in claims["items"]] == [True, True]


def test_a_quorum_decision_names_every_approver(client):
    """Two people approve a hold that needs two: the one resume's receipt names both, each as a person."""
    ann, bob = factories.person("ann", role="member"), factories.person("bob", role="member")
    _, hold = factories.held_hold(factories.capability("pay_big", quorum={"approvals": 2, "from": ["member"]}))
    body = {"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]}
    for person, status in ((ann, 202), (bob, 200)):
        client.force_login(person)
        response = client.post(f"/v0/holds/{hold.public_id}/decision", body, content_type="application/json")
        assert response.status_code == status, response.content
    (resume,) = Invocation.objects.filter(hold=hold, kind="resume")
    claims = third_party_verify(resume.resume["receipt"], public_jwks(client))
    assert claims["decided_by"] == [{"type": "person", "name": "ann"}, {"type": "person", "name": "bob"}]


def test_an_expired_hold_has_a_receipt_that_says_expired(api, cap, member_key, client):
    run, hold = factories.held_hold(cap)
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now())
    assert holds_expire_due() == 1
    invocation = Invocation.objects.get(hold=hold, kind="resume")
    # The sweep writes the resume; its receipt is signed as it is sent, the same on every send.
    assert "receipt" not in invocation.resume
    resume = delivery.invocation_body(invocation)["resume"]
    assert delivery.invocation_body(Invocation.objects.get(pk=invocation.pk))["resume"] == resume
    assert api.get(f"/v0/holds/{hold.public_id}", key=member_key).json()["resume"] == resume
    expired_at = Hold.objects.get(pk=hold.pk).decided_at
    claims = third_party_verify(resume["receipt"], public_jwks(client))
    assert claims["decided_at"] == expired_at.isoformat()
    asked = factories.ask_body()["items"]
    assert claims["resolved_by"] == "expired" and claims["decided_by"] == [{"type": "expired"}]
    assert claims["hold_id"] == hold.public_id and claims["run_id"] == run.public_id
    assert claims["items"] == [
        {"id": a["id"], "action": None, "asked_sha256": digest(a["data"]), "decided_sha256": None} for a in asked
    ]
    assert {k: v for k, v in resume.items() if k != "receipt"} == {
        "hold_id": hold.public_id,
        "resolved_by": "expired",
        "items": [],
        "comment": None,
    }


def test_rotation_keeps_old_receipts_verifying(api, cap, member_key, client):
    _, first = factories.held_hold(cap)
    old = decide(api, first, BODY, member_key).resume["receipt"]
    before = public_jwks(client)
    call_command("rotate_receipt_key", stdout=open("/dev/null", "w"))
    _, second = factories.held_hold(cap)
    new = decide(api, second, BODY, member_key).resume["receipt"]
    after = public_jwks(client)
    assert len(before["keys"]) == 1 and len(after["keys"]) == 2
    assert after["keys"][1] == before["keys"][0]  # newest first; the old public key stays
    old_kid, new_kid = (json.loads(b64url(t.split(".")[0]))["kid"] for t in (old, new))
    assert old_kid != new_kid and after["keys"][0]["kid"] == new_kid
    assert third_party_verify(old, after)["hold_id"] == first.public_id
    assert third_party_verify(new, after)["hold_id"] == second.public_id
    # The published keys are public halves only.
    assert all(set(k) == {"kty", "crv", "x", "kid", "use", "alg"} for k in after["keys"])


def test_a_changed_byte_fails_and_an_unknown_kid_fails(api, cap, member_key, client):
    _, hold = factories.held_hold(cap)
    token = decide(api, hold, BODY, member_key).resume["receipt"]
    jwks = public_jwks(client)
    header, payload, signature = token.split(".")
    claims = json.loads(b64url(payload))
    claims["items"][1]["action"] = "approve"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(InvalidSignature):
        third_party_verify(f"{header}.{forged}.{signature}", jwks)
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    with pytest.raises(InvalidSignature):
        third_party_verify(f"{header}.{payload}.{flipped}", jwks)
    with pytest.raises(LookupError):
        third_party_verify(token, {"keys": []})


def test_the_jwks_needs_no_key_and_takes_only_get(client):
    assert client.get("/.well-known/jwks.json").json() == {"keys": []}  # none until the first receipt
    assert client.post("/.well-known/jwks.json").status_code == 405


def test_the_private_key_is_stored_encrypted(api, cap, member_key):
    from holds.models import ReceiptKey

    _, hold = factories.held_hold(cap)
    decide(api, hold, BODY, member_key)
    row = ReceiptKey.objects.get()
    assert "PRIVATE" not in row.private_encrypted and "d" not in row.public_jwk


def test_a_changed_secret_key_makes_a_new_key_and_old_receipts_still_verify(api, cap, member_key, client, settings):
    from holds.services import receipts

    _, first = factories.held_hold(cap)
    old = decide(api, first, BODY, member_key).resume["receipt"]
    settings.SECRET_KEY = "another-secret-key-" + "x" * 40
    receipts.forget_current_key()
    _, second = factories.held_hold(cap)
    new = decide(api, second, BODY, member_key).resume["receipt"]
    jwks = public_jwks(client)
    assert len(jwks["keys"]) == 2
    assert third_party_verify(old, jwks)["hold_id"] == first.public_id
    assert third_party_verify(new, jwks)["hold_id"] == second.public_id


SMALL = {"id": "small", "when": "item.data.amount < 100", "then": "approve"}


def rules_hold(api, cap, amounts):
    from holds import services
    from holds.auth import SYSTEM

    services.rules_save(capability=cap, rules=[SMALL], actor=SYSTEM)
    body = factories.ask_body(
        len(amounts),
        items=[{"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"amount": v}} for n, v in enumerate(amounts, 1)],
    )
    run = factories.start_run(cap)
    _, token = factories.deliver_now(run)
    response = api.post("/v0/holds", body, token=token)
    assert response.status_code == 201, response.content
    return run, Hold.objects.get(pk=int(response.json()["hold_id"][2:])), body


def test_a_rule_decision_names_the_rule_and_its_version(api, cap, client):
    run, hold, body = rules_hold(api, cap, [5, 7])
    resume = Invocation.objects.get(hold=hold, kind="resume").resume
    claims = third_party_verify(resume["receipt"], public_jwks(client))
    rule = {"type": "rule", "id": "small", "version": 1}
    assert claims["resolved_by"] == "rule" and claims["decided_by"] == [rule]
    assert claims["items"] == [
        {
            "id": item["id"],
            "action": "approve",
            "asked_sha256": digest(item["data"]),
            "decided_sha256": digest(item["data"]),
            "decided_by": rule,
        }
        for item in body["items"]
    ]


def test_a_hold_partly_decided_by_a_rule_names_the_rule_and_the_person(api, cap, member_key, client):
    _, hold, body = rules_hold(api, cap, [5, 700])
    edited = {"amount": 650}
    resume = decide(api, hold, {"items": [{"id": "INV-2", "action": "edit", "data": edited}]}, member_key).resume
    claims = third_party_verify(resume["receipt"], public_jwks(client))
    rule = {"type": "rule", "id": "small", "version": 1}
    assert claims["decided_by"] == [{"type": "service_account", "name": "service account robot"}, rule]
    assert [(i["id"], i["action"], i.get("decided_by")) for i in claims["items"]] == [
        ("INV-1", "approve", rule),
        ("INV-2", "edit", None),
    ]
    assert claims["items"][1]["decided_sha256"] == digest(edited)
    assert claims["items"][1]["asked_sha256"] == digest(body["items"][1]["data"])
